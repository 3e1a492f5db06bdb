"""run.time_budget_s: a run sized by time ends cleanly after its budget, as run.steps ends it after
N steps, says so in its summary, and every rank stops after the same step."""

from __future__ import annotations

import pytest

from workbench.config import ConfigError
from workbench.distributed.launch import run
from workbench.events import read_events


def _steps_by_rank(run_dir) -> dict[int, int]:
    out: dict[int, int] = {}
    for r in read_events(run_dir):
        if r.get("event") == "step":
            out[r["rank"]] = max(out.get(r["rank"], 0), r["step"])
    return out


@pytest.mark.parametrize("nproc", [1, 2])
def test_a_budget_ends_the_run_cleanly_on_every_rank(smoke, one_thread, nproc):
    cfg = smoke.replace(**{"run.steps": 1_000_000, "run.time_budget_s": 1.0, "distributed.nproc": nproc})
    s = run(cfg, timeout_s=300)
    assert s["status"] == "completed", s
    assert s["ended_by"] == "time_budget" and s["steps_planned"] == 1_000_000
    assert 0 < s["steps"] < 1_000_000
    assert s["ended_note"] == f"ended by its time budget (1 s) after {s['steps']} of at most 1000000 steps"
    assert _steps_by_rank(s["run_dir"]) == {r: s["steps"] for r in range(nproc)}  # same last step
    assert "eval_accuracy" in s and s["samples_per_s"] > 0


def test_steps_end_a_run_before_its_budget(smoke, one_thread):
    s = run(smoke.replace(**{"run.steps": 5, "run.time_budget_s": 3600.0}), timeout_s=300)
    assert s["status"] == "completed" and s["steps"] == 5 and s["ended_by"] == "steps"


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_a_bad_budget_is_refused_in_one_line(smoke, value):
    with pytest.raises(
        ConfigError, match=r"run\.time_budget_s must be (a number of seconds >= 0|a finite number)"
    ):
        smoke.replace(**{"run.time_budget_s": value})
