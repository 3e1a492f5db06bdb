"""Run folders are claimed atomically: two starts in one folder at the same instant, in threads or
processes, give exactly one run and one clean ConfigError, many times over; a folder removed while
its run goes is named as removed, and the run's processes end; every key a run writes into its
summary.json is declared in its type (workbench.runfolder.Summary)."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import subprocess
import sys
import threading

import pytest

from workbench.config import ConfigError, RunConfig
from workbench.distributed.faults import Diagnosis
from workbench.distributed.launch import run, start_run
from workbench.events import read_events
from workbench.runfolder import RunFolder, Summary, is_final
from workbench.runstore import create_run_dir

from launch_helpers import assert_all_gone, run_pids, wait_for_steps

TRIES = 25


def _race(target, n: int = 2):
    """Run `target` in n threads released together; returns what each returned or raised."""
    barrier = threading.Barrier(n)
    out = [None] * n

    def go(i):
        barrier.wait()
        try:
            out[i] = target()
        except Exception as e:  # noqa: BLE001 - the test counts what each start got
            out[i] = e

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


@pytest.mark.slow
def test_two_threads_starting_one_folder_give_one_run(smoke, runs_root, one_thread):
    cfg = smoke.replace(**{"run.steps": 100_000})
    start_run(cfg, runs_root / "warm").stop()  # the pre-launch check is measured once, then reused
    for i in range(TRIES):
        folder = runs_root / f"race{i}"
        got = _race(lambda: start_run(cfg, folder))
        handles = [g for g in got if not isinstance(g, Exception)]
        errors = [g for g in got if isinstance(g, Exception)]
        assert len(handles) == 1 and len(errors) == 1, got
        assert isinstance(errors[0], ConfigError) and "already holds a run" in str(errors[0])
        handle = handles[0]
        handle.stop()
        assert json.loads((folder / "launch.json").read_text())["supervisor_pid"] == handle.proc.pid
        assert RunConfig.load(folder / "config.json") == cfg
        assert not list(folder.glob("*.tmp")) and not list(folder.glob(".*.tmp"))


def _claim(path, barrier, results):
    barrier.wait()
    try:
        create_run_dir(RunConfig.smoke(), path=path)
        results.put("ok")
    except ConfigError as e:
        results.put(f"ConfigError: {e}")
    except Exception as e:  # noqa: BLE001
        results.put(f"{type(e).__name__}: {e}")


def test_two_processes_claiming_one_folder_give_one_claim(tmp_path):
    ctx = multiprocessing.get_context("fork")
    for i in range(TRIES):
        folder = tmp_path / f"race{i}"
        barrier, results = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_claim, args=(folder, barrier, results)) for _ in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        got = sorted(results.get(timeout=10) for _ in procs)
        assert got[0].startswith("ConfigError: run dir") and "already holds a run" in got[0], got
        assert got[1] == "ok", got
        assert RunConfig.load(folder / "config.json") == RunConfig.smoke()


START = """
import sys
from workbench.config import ConfigError, RunConfig
from workbench.distributed.faults import Diagnosis
from workbench.distributed.launch import run, start_run
sys.stdin.readline()  # both processes are up: go
try:
    handle = start_run(RunConfig.smoke().replace(**{"run.steps": 5, "run.eval_batches": 0}), sys.argv[1])
except ConfigError as e:
    print("refused:", e, flush=True)
    sys.exit(2)
handle.wait()
print("ran", flush=True)
"""


@pytest.mark.slow
def test_two_processes_starting_one_folder_give_one_run(runs_root, one_thread):
    folder = runs_root / "shared"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", START, str(folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [p.communicate(timeout=240) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], outs
    refused = next(o for o, _ in outs if o.startswith("refused"))
    assert "already holds a run" in refused and refused.count("\n") == 1
    assert all("Traceback" not in err for _, err in outs), outs
    records = read_events(folder)
    assert sum(r["event"] == "start" for r in records) == 1
    assert sum(r["event"] == "step" for r in records) == 5
    assert sum(r["event"] == "done" for r in records) == 1


@pytest.mark.slow
def test_a_run_folder_removed_mid_run_is_named_and_its_processes_end(smoke, one_thread):
    cfg = smoke.replace(**{"run.steps": 1_000_000, "run.time_budget_s": 600.0})
    handle = start_run(cfg)
    wait_for_steps(handle.run_dir, ranks=1)
    pids = run_pids(handle.proc.pid, handle.run_dir)
    shutil.rmtree(handle.run_dir)
    handle.wait(cfg.distributed.timeout_s)  # named within the collective timeout, not at the budget
    summary = handle.summary()
    assert summary["cause"] == "folder_removed" and summary["status"] == "failed", summary
    assert f"the run folder {str(handle.run_dir)!r} was removed" in summary["message"]
    assert_all_gone(pids, within=30)
    assert not handle.run_dir.exists()  # nothing wrote it back


def test_every_key_a_run_writes_into_its_summary_is_declared(smoke, runs_root, one_thread):
    """summary.json's keys are listed, with their types, in workbench.runfolder.Summary: a real
    one-step run (fp16, so the loss scaler's keys come too), completed by its supervisor, writes
    none it does not declare; nor does the diagnosis of a failed run."""
    result = run(smoke.replace(**{"run.steps": 1, "precision.dtype": "fp16"}), timeout_s=120)
    assert result["status"] == "completed", result
    written = RunFolder(result["run_dir"]).summary()
    declared = Summary.__required_keys__ | Summary.__optional_keys__
    assert is_final(written) and {"grad_scale", "samples_per_s", "steps"} <= set(written)
    assert set(written) <= declared, f"declare in Summary: {sorted(set(written) - declared)}"
    diagnosis = Diagnosis(
        "raised", "E", "m", failed_rank=0, signal="SIGKILL", traceback="tb", status="stopped"
    ).as_dict(attempt=0)
    assert set(diagnosis) <= declared, f"declare in Summary: {sorted(set(diagnosis) - declared)}"
