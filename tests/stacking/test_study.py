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
        rate = self.rates[label][min(max(0, n - 1), len(self.rates[label]) - 1)]  # the first: warm-up
        return Slice(label, rate, 1.0, 1.0, 0.0, steps=20, losses=[1.0] * 20)


def _trial(**rates):
    from workbench.trials.engine import Trial

    host = _Rates(rates)
    return Trial({k: host for k in rates}, next(iter(rates))).run(len(next(iter(rates.values()))))


def test_rows_say_faster_slower_and_skipped_from_paired_slices_and_keep_only_faster():
    step = PlannedStep(CHANGES["workers"], RunConfig.smoke())
    prev = [1000, 1010, 990, 1000, 1005, 995]
    slow = _trial(prev=prev, new=[800, 810, 790, 800, 805, 795])
    row = step_row(step, slow, "new", "prev", 2.0)
    assert row["status"] == "slower" and row["kept"] is False and "not kept" in row["note"]
    fast = _trial(prev=prev, new=[1500, 1515, 1485, 1500, 1507, 1492])
    row = step_row(step, fast, "new", "prev", 2.0)
    assert row["status"] == "faster" and row["kept"] is True and row["gain_low"] > 1.4 and row["rounds"] == 6
    assert row["gain_vs_prev"] == pytest.approx(1.5, rel=0.01)
    assert row["gain_vs_baseline"] == pytest.approx(3.0, rel=0.01)  # on top of the 2.0 kept before it
    same = _trial(prev=prev, new=[1010, 1000, 1000, 990, 1010, 1000])
    row = step_row(step, same, "new", "prev", 2.0)
    assert row["status"] == "within noise" and row["kept"] is False
    few = step_row(step, _trial(prev=[1000] * 2, new=[1500] * 2), "new", "prev", 1.0)
    assert few["status"] == "undecided" and "too few" in few["note"] and few["kept"] is False
    failed = step_row(step, None, None, "prev", failed="new: RuntimeError: boom")
    assert failed["status"] == "failed" and "boom" in failed["reason"] and failed["kept"] is False
    skipped = step_row(PlannedStep(CHANGES["pin_memory"], RunConfig.smoke(), "no GPU"), None, None, "prev")
    assert skipped["status"] == "skipped" and skipped["reason"] == "no GPU"


def test_the_total_row_says_whether_the_product_lies_inside_the_measured_interval():
    from workbench.measure import claims
    from workbench.stacking.study import total_claim, total_row

    trial = _trial(base=[1000] * 6, best=[1500, 1510, 1490, 1505, 1495, 1500])
    inside = total_row(trial, "base", "best", 1.5, None)
    assert "lies inside this interval" in inside["note"] and inside["gain_vs_baseline"] == 1.5
    outside = total_row(trial, "base", "best", 2.4, None)
    assert "lies outside this interval" in outside["note"]
    kept = {"step": "+ bf16", "status": "faster", "kept": True, "gain_vs_prev": 1.5}
    base = {"step": "baseline", "status": "baseline", "kept": True, "gain_vs_prev": 1.0}
    claims.clear()
    total_claim([base, kept, inside])  # the product, recomputed from the kept rows, and the sentence
    assert all(c.holds for c in claims.made())
    # planted: a total whose product is not the kept steps' (1.5 x 1.2 = 1.8, said 1.5)
    claims.clear()
    total_claim([base, kept, {**kept, "step": "+ workers", "gain_vs_prev": 1.2}, inside])
    assert not claims.made()[-1].holds
    # planted: a sentence that says inside where the printed interval has the product outside
    claims.clear()
    total_claim(
        [base, {**kept, "gain_vs_prev": 2.4}, {**outside, "note": inside["note"].replace("1.50", "2.40")}]
    )
    assert not claims.made()[-1].holds
    claims.clear()


def test_a_step_whose_every_pair_was_dropped_reads_not_measured_never_nan():
    """Mid-study a step can have slices but no pair yet (the machine changed inside each): its
    status is a word, since a None would become NaN in the table the panel draws from."""
    from workbench.trials.engine import Trial

    class _Changing(_Rates):  # "new" meets other programs that its partners did not
        def slice(self, label, seconds):
            s = super().slice(label, seconds)
            s.other_cores = 1.0 if label == "new" else 0.0
            return s

    rates = {"prev": [1000] * 3, "new": [1500] * 3}
    trial = Trial({k: _Changing(rates) for k in rates}, "prev").run(3)
    row = step_row(PlannedStep(CHANGES["workers"], RunConfig.smoke()), trial, "new", "prev")
    assert row["status"] == "not measured" and row["gain_vs_prev"] is None


@pytest.mark.slow
def test_a_real_study_measures_each_step_against_the_best_so_far_and_keeps_only_faster(tmp_path):
    seen = []
    df = run_study(
        RunConfig.smoke(),
        ["bf16", "pin_memory"],
        rounds=2,
        on_update=lambda table: seen.append(list(table["step"])),
        timeout_s=180,
    )
    assert seen[-1] == ["baseline", "+ bf16", "+ pinned memory"]  # no total: nothing was kept
    assert list(df["status"])[0] == "baseline" and df["status"][2] == "skipped"
    # the claim the plan table makes before the study is what the study then did, step by step
    planned = plan_table(RunConfig.smoke(), ["bf16", "pin_memory"])
    assert list(planned["will_run"]) == [status != "skipped" for status in df["status"]]
    assert df["status"][1] == "undecided" and "too few" in df["note"][1]  # 2 pairs: no verdict
    assert list(df["kept"]) == [True, False, False] and df.attrs["kept"] == {} and df.attrs["product"] == 1.0
    assert list(df["rounds"][:2]) == [2, 2]
    assert (df["samples_per_s"][:2] > 0).all() and (df["mem_held_mib"][:2] > 0).all()
    assert df["gain_low"].isna()[1] and df["gain_high"].isna()[1]  # 2 pairs carry no interval
    from workbench.runstore import load_config

    assert load_config(df["run_dir"][1]).precision.dtype == "bf16"
    assert load_config(df.attrs["best_run_dir"]).precision.dtype == "fp32"  # what to export: the baseline


def test_a_kept_step_is_stacked_under_the_next_and_the_total_is_measured(monkeypatch):
    """With a host whose bf16 is faster and whose workers are slower (stand-ins for the warm
    processes), the study keeps bf16, measures workers on top of it, drops it, and measures the
    kept config against the baseline: the export holds bf16 alone."""
    from workbench.stacking import study
    from workbench.trials.engine import Slice

    speed = {"fp32": 1000.0, "bf16": 1500.0}

    class Hosts:
        def __init__(self, baseline, timeout_s=None):
            self.variants, self.built, self.cfgs = {}, {}, {}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def add(self, label, cfg):
            self.cfgs[label] = cfg
            self.variants[label] = self
            self.built[label] = {"run_dir": f"runs/{label}"}

        def slice(self, label, seconds):
            cfg = self.cfgs[label]
            rate = speed[cfg.precision.dtype] * (0.7 if cfg.loader.num_workers else 1.0)
            return Slice(label, rate, 1.0, 1.0, 0.0, steps=10, losses=[1.0] * 10)

        def of(self, labels):
            return {k: self for k in labels}

        def memory(self, label):
            return None

        def drop(self, label):
            self.variants.pop(label)

        def save(self, label):
            pass

        def record(self, s):
            pass

    from workbench.measure import claims

    monkeypatch.setattr(study, "TrainingHosts", Hosts)
    claims.clear()
    df = run_study(RunConfig.smoke(), ["bf16", "workers"], rounds=6)
    assert all(c.holds for c in claims.made()) and any(c.kind == "product" for c in claims.made())
    claims.clear()
    assert list(df["step"]) == ["baseline", "+ bf16", "+ 2 loader workers", study.TOTAL]
    assert list(df["kept"][:3]) == [True, True, False] and df.attrs["kept"] == {"precision.dtype": "bf16"}
    assert df["gain_vs_prev"][2] == pytest.approx(0.7) and df["gain_vs_baseline"][2] == pytest.approx(1.05)
    assert df.attrs["product"] == pytest.approx(1.5) and df["gain_vs_prev"][3] == pytest.approx(1.5)
    assert df.attrs["best_run_dir"] == "runs/stack1-bf16"
