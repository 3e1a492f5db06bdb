"""A Hugging Face Trainer script and a Lightning script, each with one callback added (the
examples), run for real as their own processes: every step is recorded with its loss and samples,
the trainer's settings become the run's, and the time budget `workbench ab --cmd` sets stops the
trainer, which then ends as it always does (exit 0)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.events import LAST, read_events
from workbench.runfolder import RunFolder
from workbench.runstore import read_summary

ROOT = Path(__file__).resolve().parents[2]


def run_example(name: str, run_dir: Path, *args: str, budget_s: float = 0) -> subprocess.CompletedProcess:
    env = {**os.environ, "WORKBENCH_RUN_DIR": str(run_dir)}
    if budget_s:
        env["WORKBENCH_TIME_BUDGET_S"] = str(budget_s)
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        cwd=run_dir.parent,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


@pytest.mark.parametrize(
    "example, args, settings",
    [
        ("hf_trainer.py", ["--steps", "100000", "--output-dir", "hf-out"], ("learning_rate", 0.003)),
        ("lightning_loop.py", ["--epochs", "1000"], ("lr", 0.001)),
    ],
)
def test_a_library_trainer_with_one_callback_is_tracked_and_stopped_by_the_budget(
    runs_root, example, args, settings
):
    runs_root.mkdir(parents=True, exist_ok=True)
    run_dir = runs_root / example.split(".")[0]
    proc = run_example(example, run_dir, *args, budget_s=1.5)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = read_summary(run_dir)
    assert (s["status"], s["ended_by"]) == ("completed", "time_budget"), s
    steps = [r for r in read_events(run_dir) if r["event"] == "step"]
    assert len(steps) == s["steps"] >= 2 and steps[-1].get(LAST) is True
    assert all(r["loss"] > 0 and r["samples_per_s"] > 0 and r["step_time_ms"] > 0 for r in steps)
    assert all("data_wait_ms" in r for r in steps[1:])
    record = RunFolder(run_dir).script()
    key, value = settings
    assert record["params"][key] == value and record["batch_size"] in (16, 64)
    assert record["precision"] in ("fp32", "32-true")
