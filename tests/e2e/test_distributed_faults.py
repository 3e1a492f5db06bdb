"""Each way a run can go wrong, with real torchrun processes on the CPU: a rank raises, is killed,
hangs; the rendezvous endpoint is held by a silent server; a restart; stop (API and Ctrl-C); the
launching process killed. Each checks the message and that no process is left behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from launch_helpers import assert_all_gone, faulty_model, run_pids, steps_seen, wait_for, wait_for_steps
from workbench.events import read_events
from workbench.distributed.launch import run, start_run

pytestmark = pytest.mark.slow


def _cfg(smoke, tmp_path, **kwargs):
    return smoke.replace(
        **{
            "distributed.nproc": 2,
            "model.name": faulty_model(tmp_path),
            "model.kwargs": kwargs,
            "run.steps": 100_000,
            "run.eval_batches": 0,
            "distributed.timeout_s": 3.0,
        }
    )


def _finish(handle, timeout=240):
    pids = set()
    deadline = time.monotonic() + timeout
    while handle.running() and time.monotonic() < deadline:
        pids |= run_pids(handle.proc.pid, handle.run_dir)
        time.sleep(0.2)
    handle.wait(5)
    return pids


def test_a_raising_killed_exiting_or_hanging_rank_is_named(smoke, tmp_path):
    runs = {
        mode: start_run(_cfg(smoke, tmp_path, mode=mode, step=3))
        for mode in ("raise", "kill", "hang", "exit")
    }
    one = _cfg(smoke, tmp_path, mode="exit", rank=0, step=3).replace(**{"distributed.nproc": 1})
    runs["exit, one process"] = start_run(one)
    pids = {mode: _finish(h) for mode, h in runs.items()}
    s = runs["raise"].summary()
    assert (s["status"], s["cause"], s["failed_rank"]) == ("failed", "raised", 1), s
    assert "ValueError" in s["message"] and "injected fault on rank 1" in s["traceback"]
    assert "Connection" not in s["message"]  # not rank 0's knock-on error
    s = runs["kill"].summary()
    assert (s["status"], s["cause"], s["failed_rank"]) == ("failed", "killed", 1), s
    assert "SIGKILL" in s["message"] and "out of memory" in s["message"]
    for mode, rank in (("exit", 1), ("exit, one process", 0)):  # a code, not a signal
        s = runs[mode].summary()
        assert (s["status"], s["cause"], s["failed_rank"]) == ("failed", "exited", rank), s
        assert f"rank {rank} exited with code 3 after step 2" in s["message"], s
        assert "signal" not in s["message"] and "out of memory" not in s["message"], s
    s = runs["hang"].summary()
    assert (s["status"], s["cause"], s["failed_rank"]) == ("failed", "stalled", 1), s
    # The step it stalled after is the last one its own events recorded.
    last = steps_seen(runs["hang"].run_dir).get(1, 0)
    assert last >= 1
    assert f"rank 1 stalled after step {last}" in s["message"] and "forward" in s["message"]
    # the heartbeats said which part of the step each rank was in: rank 1 in its forward, rank 0
    # one part on, waiting in backward's all-reduce for it
    beats = [r for r in read_events(runs["hang"].run_dir) if r["event"] == "heartbeat" and r["step"] == last]
    assert [r.get("part") for r in beats if r["rank"] == 1][-1] == "forward", beats
    assert "backward" in {r.get("part") for r in beats if r["rank"] == 0}, beats
    for mode, h in runs.items():
        assert steps_seen(h.run_dir).get(0, 0) >= 2, mode  # events kept up to the failure
        assert_all_gone(pids[mode], within=5)


def test_rendezvous_held_by_a_silent_server_fails_at_start_timeout(smoke, tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    cfg = smoke.replace(
        **{
            "distributed.nnodes": 2,
            "distributed.node_rank": 1,
            "distributed.rdzv_endpoint": f"127.0.0.1:{server.getsockname()[1]}",
            "distributed.start_timeout_s": 6.0,
        }
    )
    t0 = time.monotonic()
    handle = start_run(cfg)
    pids = _finish(handle, timeout=120)
    took = time.monotonic() - t0
    server.close()
    s = handle.summary()
    assert (s["status"], s["cause"]) == ("failed", "start_timeout"), s
    assert "no rank started within distributed.start_timeout_s=6 s" in s["message"]
    assert "rendezvous" in s["message"] and took < 60
    assert_all_gone(pids, within=5)


SLOW_IMPORT = """import time
with open("/proc/self/cmdline", "rb") as f:
    words = f.read().split(b"\\0")
if b"-m" in words and words[words.index(b"-m") + 1] == b"workbench.worker":  # a rank, not torchrun
    time.sleep(600)
"""


@pytest.mark.parametrize("nproc", [1, 2])
def test_ranks_still_importing_at_the_start_timeout_are_not_blamed_on_rendezvous(smoke, tmp_path, nproc):
    """Python's start-up hook holds every rank before its first record, as a slow disk would.
    The start window counts from the launch, so it holds torchrun's own start too: 4 s was once
    too short for torchrun to start any rank on a loaded machine."""
    (tmp_path / "sitecustomize.py").write_text(SLOW_IMPORT)
    cfg = smoke.replace(**{"distributed.nproc": nproc, "distributed.start_timeout_s": 10.0})
    handle = start_run(cfg, env={"PYTHONPATH": str(tmp_path)})
    pids = _finish(handle, timeout=120)
    s = handle.summary()
    assert (s["status"], s["cause"]) == ("failed", "start_timeout"), s
    assert f"{nproc} rank process(es) (pid " in s["message"], s["message"]
    assert "still starting Python and importing, not waiting in rendezvous" in s["message"]
    assert_all_gone(pids, within=5)


def test_max_restarts_brings_the_group_back(smoke, tmp_path):
    cfg = _cfg(smoke, tmp_path, mode="raise", step=3, attempt=0).replace(
        **{"run.steps": 6, "distributed.max_restarts": 1}
    )
    handle = start_run(cfg)
    pids = _finish(handle)
    s = handle.summary()
    assert s["status"] == "completed", (s, handle.log_tail())
    steps = [r for r in read_events(handle.run_dir) if r["event"] == "step"]
    assert {(r["attempt"], r["rank"]) for r in steps} >= {(0, 0), (1, 0), (1, 1)}
    last = {(r["attempt"], r["rank"]): r["step"] for r in steps}
    assert last[(1, 0)] == last[(1, 1)] == 6  # the second attempt trained to the end
    assert s["attempts"] == 2 and len(s["restarts"]) == 1, s  # the failed attempt is kept
    failed = s["restarts"][0]
    assert (failed["attempt"], failed["cause"], failed["failed_rank"]) == (0, "raised", 1), failed
    assert "injected fault on rank 1" in failed["message"]
    assert_all_gone(pids, within=5)


def test_a_restart_resumes_from_the_last_saved_step_on_the_same_trajectory(smoke, tmp_path):
    """run.save_every: rank 1 raises at step 5; the restarted attempt goes on after step 4 (the last
    state saved), not from step 0, and its losses are those of a run that never failed."""
    cfg = _cfg(smoke, tmp_path, mode="raise", step=5, attempt=0).replace(
        **{"run.steps": 8, "distributed.max_restarts": 1, "run.save_every": 2}
    )
    handle = start_run(cfg)
    pids = _finish(handle)
    s = handle.summary()
    assert s["status"] == "completed" and s["attempts"] == 2, (s, handle.log_tail())
    assert s["resumed_from_step"] == 4 and s["steps"] == 8
    assert s["restarted"] == (
        "restarted once, resumed after step 4; attempt 0: rank 1 raised "
        "ValueError at step 5: injected fault on rank 1"
    ), s["restarted"]
    records = read_events(handle.run_dir)
    again = {r["rank"]: r["step"] for r in reversed(records) if r["event"] == "step" and r["attempt"] == 1}
    assert again == {0: 5, 1: 5}  # each rank's first step of the second attempt
    assert [r["from_step"] for r in records if r["event"] == "resumed"] == [4, 4]
    clean = run(
        cfg.replace(**{"model.kwargs": {"mode": "none"}, "distributed.max_restarts": 0}), timeout_s=240
    )
    for rank in (0, 1):
        resumed = {
            r["step"]: r["loss"]
            for r in records
            if r["event"] == "step" and r["attempt"] == 1 and r["rank"] == rank
        }
        never_failed = {
            r["step"]: r["loss"]
            for r in read_events(clean["run_dir"])
            if r["event"] == "step" and r["rank"] == rank and r["step"] > 4
        }
        assert resumed.keys() == never_failed.keys() == {5, 6, 7, 8}
        assert resumed == pytest.approx(never_failed, abs=1e-5)
    assert_all_gone(pids, within=5)


@pytest.mark.parametrize(
    "nproc, rank, sig",
    [(1, 0, signal.SIGTERM), (2, 1, signal.SIGTERM), (2, 1, signal.SIGHUP), (2, 1, signal.SIGINT)],
)
def test_a_signal_from_another_program_to_a_rank_is_named(smoke, tmp_path, nproc, rank, sig):
    handle = start_run(_cfg(smoke, tmp_path, mode="slow").replace(**{"distributed.nproc": nproc}))
    wait_for_steps(handle.run_dir, ranks=nproc)
    pid = next(r["pid"] for r in read_events(handle.run_dir) if r["event"] == "start" and r["rank"] == rank)
    os.kill(pid, sig)
    pids = _finish(handle)
    s = handle.summary()
    assert (s["status"], s["cause"], s["failed_rank"], s["signal"]) == (
        "stopped",
        "rank_signalled",
        rank,
        sig.name,
    ), s
    assert s["message"].startswith(f"rank {rank} got {sig.name} from another program after step")
    assert_all_gone(pids, within=5)


def test_stop_ends_ranks_that_ignore_sigterm_within_5_s(smoke, tmp_path):
    handle = start_run(_cfg(smoke, tmp_path, mode="slow", ignore_sigterm=True))
    wait_for_steps(handle.run_dir, ranks=2)
    pids = run_pids(handle.proc.pid, handle.run_dir)
    t0 = time.monotonic()
    handle.stop()
    assert time.monotonic() - t0 < 5.0
    assert_all_gone(pids, within=0.5)
    s = handle.summary()
    assert s["status"] == "stopped" and s["message"] == "stopped by the user"
    assert min(steps_seen(handle.run_dir).values()) >= 2  # events kept


def test_ctrl_c_in_the_cli_stops_every_rank(smoke, tmp_path, runs_root):
    run_dir = runs_root / "cli-run"
    cmd = [
        sys.executable,
        "-m",
        "workbench",
        "run",
        "--preset",
        "smoke",
        "--nproc",
        "2",
        "--model",
        faulty_model(tmp_path),
        "--set",
        'model.kwargs={"mode": "slow"}',
        "--steps",
        "100000",
        "--run-dir",
        str(run_dir),
    ]
    # a shell that starts the suite in the background hands its children SIGINT ignored: a
    # person's terminal does not, so the CLI starts with the default handler, as there
    cli = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        wait_for_steps(run_dir, ranks=2)
        pids = run_pids(cli.pid, run_dir)
        cli.send_signal(signal.SIGINT)
        out, err = cli.communicate(timeout=30)
    finally:
        if cli.poll() is None:  # a failed check leaves no run spinning behind
            cli.kill()
            cli.wait()
    assert cli.returncode == 130, err
    assert "stopped by Ctrl-C" in err
    assert_all_gone(pids, within=5)
    assert "torch.distributed.run" in err or "workbench.loopback" in err  # the command is shown
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["message"]) == ("stopped", "stopped by Ctrl-C")


PARENT = """
import sys, time
from workbench.config import RunConfig
from workbench.distributed.launch import start_run
handle = start_run(RunConfig.from_json(open(sys.argv[1]).read()), sys.argv[2])
print(handle.proc.pid, flush=True)
time.sleep(3600)
"""


def test_killing_the_launching_process_ends_the_run(smoke, tmp_path, runs_root):
    """The notebook kernel dies (SIGKILL): torchrun and every rank are gone within 10 s."""
    cfg_path, run_dir = tmp_path / "cfg.json", runs_root / "orphan-check"
    cfg_path.write_text(_cfg(smoke, tmp_path, mode="slow").to_json())
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(cfg_path), str(run_dir)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    supervisor = int(parent.stdout.readline())
    wait_for_steps(run_dir, ranks=2)
    pids = run_pids(supervisor, run_dir)
    assert len(pids) >= 4  # supervisor, torchrun, two ranks
    parent.kill()
    parent.wait()
    took = assert_all_gone(pids, within=10)
    print(f"every process gone {took:.2f} s after the parent was killed")
    wait_for(
        lambda: (
            (run_dir / "summary.json").is_file()
            and json.loads((run_dir / "summary.json").read_text()).get("status") == "stopped"
        ),
        5,
        "summary",
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["cause"] == "launcher_exited" and "exited" in summary["message"], summary


def _pids_of(handle) -> dict:
    """The supervisor, its torchrun agent and each rank, by role."""
    import psutil

    ranks = {r["rank"]: r["pid"] for r in read_events(handle.run_dir) if r["event"] == "start"}
    return {
        "supervisor": handle.proc.pid,
        "agent": psutil.Process(handle.proc.pid).children()[0].pid,
        "ranks": ranks,
    }


def test_a_frozen_rank_is_stalled_within_the_timeout(smoke, tmp_path):
    """SIGSTOP on a rank: the watchdog says stalled and frozen (not SIGKILL, not out of memory)
    within distributed.timeout_s plus a few seconds, and the stopped process is not left behind."""
    cfg = _cfg(smoke, tmp_path, mode="slow").replace(**{"distributed.timeout_s": 5.0})
    handle = start_run(cfg)
    wait_for_steps(handle.run_dir, ranks=2, step=3)
    pids = run_pids(handle.proc.pid, handle.run_dir)
    frozen = _pids_of(handle)["ranks"][1]
    t0 = time.monotonic()
    os.kill(frozen, signal.SIGSTOP)
    handle.wait(120)
    took = time.monotonic() - t0
    print(f"SIGSTOP -> stalled in {took:.1f} s (distributed.timeout_s=5)")
    s = handle.summary()
    assert (s["status"], s["cause"], s["failed_rank"]) == ("failed", "stalled", 1), s
    assert f"pid {frozen}) is stopped" in s["message"] and "SIGKILL" not in s["message"]
    assert took < 5.0 + 15  # the timeout plus a few seconds (generous on a busy 2-core machine)
    assert_all_gone(pids, within=5)


FAULTS = {  # what is done to which process -> (status, cause, words of the message)
    "agent SIGKILL": ("agent", signal.SIGKILL, "failed", "agent_killed", "torchrun agent"),
    "agent SIGTERM": ("agent", signal.SIGTERM, "stopped", "agent_signalled", "got SIGTERM"),
    "supervisor SIGTERM": ("supervisor", signal.SIGTERM, "stopped", "supervisor_signalled", "not from"),
    "supervisor SIGKILL": ("supervisor", signal.SIGKILL, "failed", "supervisor_killed", "was killed by"),
}


def test_killed_agent_and_supervisor_each_get_their_own_cause(smoke, tmp_path):
    handles = {name: start_run(_cfg(smoke, tmp_path, mode="slow")) for name in FAULTS}
    pids, took = {}, {}
    for name, h in handles.items():
        wait_for_steps(h.run_dir, ranks=2)
    for name, h in handles.items():
        pids[name] = run_pids(h.proc.pid, h.run_dir)
        role, sig = FAULTS[name][:2]
        t0 = time.monotonic()
        os.kill(_pids_of(h)[role], sig)
        h.wait(60)
        took[name] = time.monotonic() - t0
    for name, h in handles.items():
        status, cause, words = FAULTS[name][2:]
        s = h.summary()
        print(f"{name} -> {cause} in {took[name]:.2f} s")
        assert (s["status"], s["cause"]) == (status, cause), (name, s)
        assert words in s["message"] and "out of memory" not in s["message"], (name, s)
        assert "after step" in s["message"], (name, s)
        assert_all_gone(pids[name], within=10)


def test_a_run_whose_whole_tree_died_is_shown_ended(smoke, tmp_path, runs_root, capsys):
    """Everything killed at once (kernel, supervisor, torchrun, ranks): nothing writes a record,
    and every reader says it ended, with its last step, because its processes are gone."""
    from workbench.cli import main as cli
    from workbench.runstore import compare, list_runs, read_summary
    from workbench.ui import attach

    cfg_path, run_dir = tmp_path / "cfg.json", runs_root / "whole-tree"
    cfg_path.write_text(_cfg(smoke, tmp_path, mode="slow").to_json())
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(cfg_path), str(run_dir)], stdout=subprocess.PIPE, text=True
    )
    supervisor = int(parent.stdout.readline())
    wait_for_steps(run_dir, ranks=2)
    pids = run_pids(supervisor, run_dir) | {parent.pid}
    # frozen first, then killed: killed one by one, a process that outlived another could record
    # its death first (CI once read a summary without a cause here)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    parent.wait()
    t0 = time.monotonic()
    assert_all_gone(pids, within=10)
    last = max(steps_seen(run_dir).values())
    s = read_summary(run_dir)
    with capsys.disabled():
        print(f"whole tree killed -> ended without a record, shown {time.monotonic() - t0:.2f} s after")
    assert (s["status"], s["cause"], s["steps"]) == ("failed", "vanished", last), s
    assert s["message"].startswith(f"ended without a record after step {last}")
    assert not (run_dir / "summary.json").exists()
    assert list_runs().set_index("run").loc["whole-tree", "status"] == "failed"
    assert list(compare([run_dir])["status"]) == ["failed"]
    assert cli(["runs"]) == 0 and "running" not in capsys.readouterr().out
    dash = attach(run_dir)
    assert dash.wait(30) and dash.series.status == "failed"
    dash.stop()
