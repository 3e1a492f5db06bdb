"""The worker as a real subprocess: each precision, events and summary on disk, failure and stop."""

import re
import os
import subprocess
import sys
import time

import pytest
import torch

from workbench.config import ConfigError, RunConfig
from workbench.events import read_events
from workbench.distributed.launch import run, start_run
from workbench.runstore import read_summary
from workbench.train.restore import load_model


def steps_of(run_dir):
    return [r for r in read_events(run_dir) if r["event"] == "step"]


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_each_precision_trains_and_leaves_config_events_summary_weights(dtype):
    cfg = RunConfig.smoke().replace(**{"precision.dtype": dtype})
    result = run(cfg, timeout_s=120)
    assert result["status"] == "completed", result
    run_dir = result["run_dir"]
    names = sorted(os.listdir(run_dir))
    assert {"config.json", "rank0.jsonl", "summary.json", "model.pt"} <= set(names)
    assert RunConfig.load(f"{run_dir}/config.json") == cfg
    events = read_events(run_dir)
    kinds = [e["event"] for e in events if e["event"] != "heartbeat"]  # beats come at any time
    assert kinds[:3] == ["start", "init", "ready"] and kinds[-1] == "done"
    steps = steps_of(run_dir)
    assert [s["step"] for s in steps] == list(range(1, cfg.run.steps + 1))
    for s in steps:
        assert s["step_time_ms"] > 0 and s["samples_per_s"] > 0 and s["data_wait_ms"] >= 0
    assert "rss_gib" in steps[0]  # memory is sampled at the first step, then on a timer
    if dtype == "fp16":
        assert "grad_scale" in steps[-1] and "skipped_steps" in steps[-1]
    summary = read_summary(run_dir)
    assert summary["precision"] == dtype and 0 <= summary["eval_accuracy"] <= 1
    assert summary["final_loss"] < steps[0]["loss"]  # it learned something
    assert isinstance(load_model(run_dir), torch.nn.Module)


def test_the_trained_model_beats_chance_on_digits():
    cfg = RunConfig.smoke().replace(**{"run.steps": 120, "model.width": 128})
    result = run(cfg, timeout_s=120)
    assert result["eval_accuracy"] > 0.8


BAD_MODEL = """import torch
class Bad(torch.nn.Module):
    def __init__(self, after):
        super().__init__(); self.l = torch.nn.Linear(64, 10); self.after, self.calls = after, 0
    def forward(self, x):
        self.calls += 1
        if self.calls > self.after:
            raise ValueError('shape trouble in forward')
        return self.l(x.flatten(1))
def build(after=0):
    return Bad(after)
"""


def test_a_model_that_fails_at_once_is_refused_before_launch(tmp_path, runs_root):
    (tmp_path / "bad.py").write_text(BAD_MODEL)
    cfg = RunConfig.smoke().replace(**{"model.name": f"{tmp_path / 'bad.py'}:build"})
    with pytest.raises(
        ConfigError,
        match=r"model.name .*bad.py:build'.* failed on one batch of digits "
        r"data \(x is \(2, 1, 8, 8\) float32\): ValueError: shape "
        r"trouble in forward \(checked before launch\)",
    ):
        start_run(cfg)
    assert not runs_root.exists() or not any(runs_root.iterdir())


def test_a_failing_model_ends_with_an_error_record_and_traceback(tmp_path):
    model_file = tmp_path / "bad.py"
    model_file.write_text(BAD_MODEL)
    # Three forwards pass (the pre-launch check's contract check and its forward and backward; in
    # the rank, its contract check and the forward measuring activations), so the run starts; in
    # the rank it fails while training, and the record says in which step.
    cfg = RunConfig.smoke().replace(**{"model.name": f"{model_file}:build", "model.kwargs": {"after": 3}})
    result = run(cfg, timeout_s=120)
    assert result["status"] == "failed" and result["returncode"] != 0
    assert result["error_type"] == "ValueError" and "shape trouble" in result["message"]
    assert re.search(r"at step \d+|while training|step \d+", result["message"]), result["message"]
    last = read_events(result["run_dir"])[-1]
    assert last["event"] == "error" and "shape trouble in forward" in last["traceback"]
    assert "shape trouble" in (tmp_path.parent / result["run_dir"] / "rank0.traceback.txt").read_text()


def test_stop_ends_the_run_within_seconds_and_keeps_its_events():
    cfg = RunConfig.smoke().replace(**{"run.steps": 100000})
    handle = start_run(cfg)
    deadline = time.time() + 60
    while time.time() < deadline and len(steps_of(handle.run_dir)) < 5:
        time.sleep(0.1)
    assert len(steps_of(handle.run_dir)) >= 5
    t0 = time.time()
    handle.stop()
    assert time.time() - t0 < 5 and not handle.running()
    events = read_events(handle.run_dir)
    assert events[-1]["event"] == "error" and events[-1]["status"] == "stopped"
    assert read_summary(handle.run_dir)["status"] == "stopped"


def test_refused_precision_writes_nothing(monkeypatch, runs_root):
    cfg = RunConfig.smoke().replace(**{"precision.tf32": True})
    with pytest.raises(ConfigError, match=r"precision\.tf32 cannot be True on cpu"):
        start_run(cfg)
    assert not runs_root.exists() or not any(runs_root.iterdir())


def test_worker_reads_the_torchrun_environment(tmp_path):
    cfg = RunConfig.smoke().replace(**{"run.steps": 3, "run.eval_batches": 0})
    cfg.save(tmp_path / "config.json")
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", TORCHELASTIC_RESTART_COUNT="2")
    subprocess.run(
        [sys.executable, "-m", "workbench.worker", "--config", str(tmp_path / "config.json")],
        env=env,
        check=True,
        timeout=120,
    )
    assert {e["attempt"] for e in read_events(tmp_path)} == {2}


def test_worker_with_a_missing_config_exits_with_a_reason(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "workbench.worker", "--config", str(tmp_path / "nope.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_a_rank_numbers_its_attempt_after_those_it_began_in_the_run_folder(tmp_path):
    """Each node's torchrun counts only its own failures: a rank restarted because another node's
    rank died hears restart 0 again, and takes its attempt from the shared run folder."""
    from workbench.events import EventWriter
    from workbench.train.rank import RankEnv
    from workbench.train.rank_process import attempt_of

    assert attempt_of(tmp_path, RankEnv(rank=1)) == 0  # a first start
    for attempt in (0, 1):
        w = EventWriter(tmp_path, 1, attempt)
        w.write("start", pid=1)
        w.close()
    assert attempt_of(tmp_path, RankEnv(rank=1, attempt=0)) == 2
    assert attempt_of(tmp_path, RankEnv(rank=1, attempt=5)) == 5  # after SLURM requeues: later
    assert attempt_of(tmp_path, RankEnv(rank=0)) == 0  # another rank's file is not this rank's


@pytest.mark.parametrize("world_size, runs_exit_handlers", [("1", True), ("2", False)])
def test_a_rank_of_several_leaves_without_the_interpreters_teardown(world_size, runs_exit_handlers):
    """procs.leave: one process exits as usual; one rank of several skips the interpreter's and
    C++'s teardown (which raced with the other ranks') and keeps its exit code and output."""
    code = (
        "import atexit\nfrom workbench.procs import leave\n"
        "atexit.register(lambda: print('teardown ran'))\nprint('last line', end='')\nleave(3)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "WORLD_SIZE": world_size},
    )
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.startswith("last line")
    assert ("teardown ran" in proc.stdout) == runs_exit_handlers
