"""The stacking study: each row's verdict from paired slices, and one real study of two runs."""

from __future__ import annotations

import pytest

from workbench.config import RunConfig
from workbench.stacking.plan import PlannedStep, plan_table
from workbench.stacking.study import run_study, step_row
from workbench.trials.changes import CHANGES


class _Rates:
    """A host whose slices run at given rates, round by round (quiet, 1 s each)."""

    def __init__(self, rates: dict):
        self.rates, self.calls = rates, {k: 0 for k in rates}

    def slice(self, label, seconds):
        from workbench.trials.engine import Slice

        n = self.calls[label]
        self.calls[label] += 1
        rate = self.rates[label][max(0, n - 1)]  # the first call is the warm-up
        return Slice(label, rate, 1.0, 1.0, 0.0, steps=20, losses=[1.0] * 20)


def _trial(**rates):
    from workbench.trials.engine import Trial

    host = _Rates(rates)
    return Trial({k: host for k in rates}, "base").run(len(next(iter(rates.values()))))


def test_rows_say_faster_slower_and_skipped_from_paired_slices():
    step = PlannedStep(CHANGES["workers"], RunConfig.smoke())
    prev, base = [1000, 1010, 990, 1000, 1005, 995], [500] * 6
    slow = _trial(base=base, prev=prev, new=[800, 810, 790, 800, 805, 795])
    assert step_row(step, slow, "new", "prev", "base")["status"] == "slower"
    fast = _trial(base=base, prev=prev, new=[1500, 1515, 1485, 1500, 1507, 1492])
    row = step_row(step, fast, "new", "prev", "base")
    assert row["status"] == "faster" and row["gain_low"] > 1.4 and row["rounds"] == 6
    assert row["gain_vs_prev"] == pytest.approx(1.5, rel=0.01)
    assert row["gain_vs_baseline"] == pytest.approx(3.0, rel=0.01)
    same = _trial(base=base, prev=prev, new=[1010, 1000, 1000, 990, 1010, 1000])
    assert step_row(step, same, "new", "prev", "base")["status"] == "within noise"
    few = step_row(step, _trial(base=[500] * 2, prev=[1000] * 2, new=[1500] * 2), "new", "prev", "base")
    assert few["status"] == "within noise" and "too few" in few["note"]
    failed = step_row(step, None, None, "prev", "base", failed="new: RuntimeError: boom")
    assert failed["status"] == "failed" and "boom" in failed["reason"]
    skipped = step_row(
        PlannedStep(CHANGES["pin_memory"], RunConfig.smoke(), "no GPU"), None, None, "prev", "base"
    )
    assert skipped["status"] == "skipped" and skipped["reason"] == "no GPU"


def test_a_step_whose_every_pair_was_dropped_reads_not_measured_never_nan():
    """Mid-study a step can have slices but no pair yet (the machine changed inside each): its
    status is a word, since a None would become NaN in the table the panel draws from."""
    from workbench.trials.engine import Trial

    class _Changing(_Rates):  # "new" meets other programs that its partners did not
        def slice(self, label, seconds):
            s = super().slice(label, seconds)
            s.other_cores = 1.0 if label == "new" else 0.0
            return s

    rates = {"base": [500] * 3, "prev": [1000] * 3, "new": [1500] * 3}
    trial = Trial({k: _Changing(rates) for k in rates}, "base").run(3)
    row = step_row(PlannedStep(CHANGES["workers"], RunConfig.smoke()), trial, "new", "prev", "base")
    assert row["status"] == "not measured" and row["gain_vs_prev"] is None


@pytest.mark.slow
def test_real_study_runs_each_step_in_alternating_rounds(tmp_path):
    seen = []
    df = run_study(
        RunConfig.smoke(),
        ["bf16", "pin_memory"],
        rounds=2,
        on_update=lambda table: seen.append(list(table["step"])),
        timeout_s=180,
    )
    assert len(seen) == 3  # a table after each of the 2 rounds, and the final one
    assert seen[-1] == ["baseline", "+ bf16", "+ pinned memory"]
    assert list(df["status"])[0] == "baseline" and df["status"][2] == "skipped"
    # the claim the plan table makes before the study is what the study then did, step by step
    planned = plan_table(RunConfig.smoke(), ["bf16", "pin_memory"])
    assert list(planned["will_run"]) == [status != "skipped" for status in df["status"]]
    assert df["status"][1] == "within noise" and "too few" in df["note"][1]  # 2 rounds: no verdict
    assert list(df["rounds"][:2]) == [2, 2]
    assert (df["samples_per_s"][:2] > 0).all() and (df["mem_held_gib"][:2] > 0).all()
    # the gain is the median of the rounds' paired ratios, not the ratio of the medians
    assert df["gain_vs_baseline"][1] == pytest.approx(df["gain_vs_prev"][1])
    assert df["gain_low"].isna()[1] and df["gain_high"].isna()[1]  # 2 pairs carry no interval
    from workbench.runstore import load_config

    assert load_config(df["run_dir"][1]).precision.dtype == "bf16"
