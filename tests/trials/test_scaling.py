"""The scaling study: its plan (pure, both modes), and a real 1-vs-2-process strong-scaling study on
the CPU (weak scaling runs the same code with another plan)."""

from __future__ import annotations

import os

import pytest

from workbench.config import ConfigError
from workbench.events import read_events
from workbench.trials.scaling import add_ideal, explain, plan, study


def test_plan_keeps_the_global_batch_fixed_for_strong_scaling(smoke):
    cfg = smoke.replace(**{"loader.batch_size": 64})
    rows = {(e["mode"], e["processes"]): e for e in plan(cfg, (1, 2, 4))}
    assert [rows[("strong", n)]["global_batch"] for n in (1, 2, 4)] == [64, 64, 64]
    assert [rows[("strong", n)]["batch_per_rank"] for n in (1, 2, 4)] == [64, 32, 16]
    assert [rows[("weak", n)]["global_batch"] for n in (1, 2, 4)] == [64, 128, 256]
    assert rows[("weak", 1)]["shared"]  # the 1-process run serves both modes
    acc = {e["processes"]: e for e in plan(cfg, (1, 2, 4), modes=("strong",), accumulate=True)}
    assert [(acc[n]["batch_per_rank"], acc[n]["grad_accum_steps"]) for n in (1, 2, 4)] == [
        (64, 4),
        (64, 2),
        (64, 1),
    ]
    assert {acc[n]["global_batch"] for n in acc} == {256}


def test_plan_refuses_what_cannot_be_split(smoke):
    with pytest.raises(ConfigError, match=r"loader.batch_size \(32\) must be divisible .* got 3"):
        plan(smoke, (1, 3))
    with pytest.raises(ConfigError, match="processes must be integers >= 1"):
        plan(smoke, (0, 2))
    with pytest.raises(ConfigError, match="modes must be 'strong' and/or 'weak'"):
        plan(smoke, (1, 2), modes=("diagonal",))


def test_ideal_and_efficiency():
    rows = add_ideal(
        [
            {"mode": "strong", "processes": 1, "samples_per_s": 1000.0},
            {"mode": "strong", "processes": 2, "samples_per_s": 1500.0},
        ]
    )
    assert rows[1]["ideal_samples_per_s"] == 2000.0 and rows[1]["efficiency"] == 0.75
    assert rows[1]["speedup"] == 1.5


@pytest.mark.slow
def test_study_runs_one_and_two_processes(smoke):
    cfg = smoke.replace(**{"run.steps": 30, "run.eval_batches": 0})
    seen = []
    df = study(cfg, (1, 2), modes=("strong",), on_update=seen.append, timeout_s=240, rounds=2)
    assert list(zip(df["mode"], df["processes"], df["batch_per_rank"])) == [
        ("strong", 1, 32),
        ("strong", 2, 16),
    ]
    assert (df["status"] == "completed").all() and len(seen) == 2  # a table after each round
    assert list(df["rounds"]) == [2, 2]
    two = df[df["processes"] == 2].iloc[0]
    assert two["samples_per_s"] > 0 and two["efficiency"] > 0
    assert two["ideal_samples_per_s"] == pytest.approx(2 * df["samples_per_s"].iloc[0], rel=1e-3)
    assert "strong scaling: 2 processes reached" in explain(df, cores=2)
    starts = [r for d in df["run_dir"] for r in read_events(d) if r["event"] == "init"]
    # the same cores in total: 1 process x 2 threads, 2 ranks x 1 thread (on 2 usable cores)
    cores = len(os.sched_getaffinity(0))
    assert len(starts) == 3 and sorted(r["threads"] for r in starts) == sorted(
        [cores, max(1, cores // 2), max(1, cores // 2)]
    )
    assert df["total_threads"].tolist() == [cores, 2 * max(1, cores // 2)]
    assert "in total" in explain(df, cores=cores)
