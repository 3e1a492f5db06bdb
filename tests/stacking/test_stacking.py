"""The stacking study: planning (what applies on which hardware), the table's verdicts, the waterfall
data, and one real study of two runs."""

from __future__ import annotations

import os

import pandas as pd
import pytest
import torch

from workbench.config import ConfigError, RunConfig
from workbench.trials.changes import CHANGES
from workbench.stacking.plan import PlannedStep, final_config, plan, plan_table
from workbench.stacking.study import run_study, step_row
from workbench.stacking.waterfall import waterfall_records


def cnn() -> RunConfig:
    return RunConfig.smoke().replace(
        **{
            "model.name": "cnn",
            "model.width": 8,
            "data.name": "synthetic_images",
            "data.image_size": 16,
            "data.num_samples": 256,
        }
    )


def test_plan_on_cpu_skips_what_cannot_run_here_with_the_reason():
    steps = plan(RunConfig.smoke(), ["bf16", "channels_last", "pin_memory", "tf32", "bf16"])
    by_label = [(s.change.key, s.reason) for s in steps]
    assert by_label[0] == ("baseline", None) and by_label[1] == ("bf16", None)
    assert "channels_last only changes image" in by_label[2][1]
    assert "pin_memory needs a GPU" in by_label[3][1]
    assert "TF32" in by_label[4][1]
    assert "already part of the config" in by_label[5][1]
    assert steps[-1].config.precision.dtype == "bf16" and not steps[-1].config.loader.pin_memory


def test_plan_table_lists_every_step():
    table = plan_table(RunConfig.smoke(), ["bf16", "pin_memory"])
    assert list(table["step"]) == ["baseline", "+ bf16", "+ pinned memory"]
    assert list(table["will_run"]) == [True, True, False]
    assert table["sets"][1] == "precision.dtype=bf16" and "needs a GPU" in table["skip_reason"][2]


def test_plan_is_cumulative_and_valid(fake_cores):
    fake_cores(4)
    cfg = final_config(cnn(), ["bf16", "channels_last", "workers", "ddp"])
    assert cfg.precision.dtype == "bf16" and cfg.precision.channels_last
    assert cfg.loader.num_workers == 2 and cfg.distributed.nproc == 2
    own = plan(cnn(), [("+ batch 64", {"loader.batch_size": 64}), ("+ bad", {"loader.batch_size": 0})])
    assert own[1].config.loader.batch_size == 64
    assert "loader.batch_size must be >= 1" in own[2].reason


def test_plan_on_a_fake_old_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    steps = {s.change.key: s.reason for s in plan(cnn(), ["bf16", "pin_memory", "ddp", "tf32"])}
    assert "has no bf16" in steps["bf16"]
    assert steps["pin_memory"] is None
    assert steps["ddp"].startswith("distributed.nproc must be <= 1 (the GPUs on this node)")
    assert "compute capability 8.0" in steps["tf32"]


def test_unknown_change_is_refused():
    with pytest.raises(ConfigError, match="stacking change 'turbo' is unknown; use one of bf16"):
        plan(RunConfig.smoke(), ["turbo"])


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


def test_waterfall_steps_add_up_to_the_total():
    df = pd.DataFrame(
        [
            {
                "step": "baseline",
                "status": "baseline",
                "samples_per_s": 100.0,
                "gain_vs_prev": 1.0,
                "gain_vs_baseline": 1.0,
                "reason": "",
            },
            {
                "step": "+ bf16",
                "status": "faster",
                "samples_per_s": 150.0,
                "gain_vs_prev": 1.5,
                "gain_vs_baseline": 1.5,
                "reason": "",
            },
            {
                "step": "+ pinned memory",
                "status": "skipped",
                "samples_per_s": None,
                "gain_vs_prev": None,
                "gain_vs_baseline": None,
                "reason": "pin_memory needs a GPU",
            },
            {
                "step": "+ 2 loader workers",
                "status": "slower",
                "samples_per_s": 120.0,
                "gain_vs_prev": 0.8,
                "gain_vs_baseline": 1.2,
                "reason": "",
            },
        ]
    )
    w = waterfall_records(df)
    assert w["measure"] == ["absolute", "relative", "relative", "relative", "total"]
    assert w["y"][:4] == pytest.approx([100.0, 50.0, 0.0, -30.0]) and w["y"][4] == 120.0
    assert sum(w["y"][:4]) == pytest.approx(w["y"][4])
    assert "pin_memory needs a GPU" in w["text"][2] and "slower" in w["text"][3]
    assert w["base"] == pytest.approx([0.0, 100.0, 150.0, 150.0, 0.0])  # from the level before
    assert w["status"] == ["baseline", "faster", "skipped", "slower", "baseline"]


def test_a_step_up_within_noise_is_coloured_as_noise_not_as_a_gain():
    from workbench.ui.stacking import waterfall_figure
    from workbench.ui.table import STATUS_COLORS

    df = pd.DataFrame(
        [
            {
                "step": "baseline",
                "status": "baseline",
                "samples_per_s": 100.0,
                "gain_vs_prev": 1.0,
                "gain_vs_baseline": 1.0,
                "reason": "",
            },
            {
                "step": "+ bf16",
                "status": "within noise",
                "samples_per_s": 103.0,
                "gain_vs_prev": 1.03,
                "gain_vs_baseline": 1.03,
                "reason": "",
            },
        ]
    )
    bars = waterfall_figure(df).data[0]
    assert list(bars.marker.color) == [
        STATUS_COLORS["baseline"],
        STATUS_COLORS["within noise"],
        STATUS_COLORS["baseline"],
    ]
    assert list(bars.y) == pytest.approx([100.0, 3.0, 103.0]) and list(bars.base) == [0.0, 100.0, 0.0]


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


def test_ddp_on_cpu_says_what_it_holds_equal(monkeypatch):
    monkeypatch.delenv("WORKBENCH_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    steps = plan(RunConfig.smoke(), ["bf16", "ddp"])
    assert steps[1].note == ""
    assert steps[2].note == (
        "1 process(es) x 2 thread(s) against 2 ranks x 1 thread(s): the same cores in total (2 vs 2)"
    )
    pinned = plan(RunConfig.smoke().replace(**{"run.threads": 2}), ["ddp"])[1]
    assert pinned.reason.startswith("distributed.nproc=2 rank(s) x 2 thread(s) (run.threads) = 4 busy")
    anyway = plan(RunConfig.smoke().replace(**{"run.threads": 2, "run.oversubscribe": True}), ["ddp"])[1]
    assert "a different number of threads in total (2 vs 4)" in anyway.note
