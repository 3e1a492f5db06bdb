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

from launch_helpers import (assert_all_gone, faulty_model, run_pids, steps_seen, wait_for,
                            wait_for_steps)
from workbench.events import read_events
from workbench.distributed.launch import start_run
from workbench.net import free_port

pytestmark = pytest.mark.slow


def _cfg(smoke, tmp_path, **kwargs):
    return smoke.replace(**{"distributed.nproc": 2, "model.name": faulty_model(tmp_path),
                            "model.kwargs": kwargs, "run.steps": 100_000, "run.eval_batches": 0,
                            "distributed.timeout_s": 3.0})


def _finish(handle, timeout=240):
    pids = set()
    deadline = time.monotonic() + timeout
    while handle.running() and time.monotonic() < deadline:
        pids |= run_pids(handle.proc.pid, handle.run_dir)
        time.sleep(0.2)
    handle.wait(5)
    return pids


def test_a_raising_killed_or_hanging_rank_is_named(smoke, tmp_path):
    runs = {mode: start_run(_cfg(smoke, tmp_path, mode=mode, step=3)) for mode in ("raise", "kill", "hang")}
    pids = {mode: _finish(h) for mode, h in runs.items()}
    s = runs["raise"].summary()
    assert (s["status"], s["cause"], s["failed_rank"]) == ("failed", "raised", 1), s
    assert "ValueError" in s["message"] and "injected fault on rank 1" in s["traceback"]
    assert "Connection" not in s["message"]  # not rank 0's knock-on error
    s = runs["kill"].summary()
    assert (s["status"], s["cause"], s["failed_rank"]) == ("failed", "killed", 1), s
    assert "SIGKILL" in s["message"] and "out of memory" in s["message"]
    s = runs["hang"].summary()
    assert (s["status"], s["cause"], s["failed_rank"]) == ("failed", "stalled", 1), s
    # The step it stalled after is the last one its own events recorded.
    last = steps_seen(runs["hang"].run_dir).get(1, 0)
    assert last >= 1
    assert f"rank 1 stalled after step {last}" in s["message"] and "forward" in s["message"]
    for mode, h in runs.items():
        assert steps_seen(h.run_dir).get(0, 0) >= 2, mode  # events kept up to the failure
        assert_all_gone(pids[mode], within=5)


def test_rendezvous_held_by_a_silent_server_fails_at_start_timeout(smoke, tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    cfg = smoke.replace(**{"distributed.nnodes": 2, "distributed.node_rank": 1,
                           "distributed.rdzv_endpoint": f"127.0.0.1:{server.getsockname()[1]}",
                           "distributed.start_timeout_s": 6.0})
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


def test_max_restarts_brings_the_group_back(smoke, tmp_path):
    cfg = _cfg(smoke, tmp_path, mode="raise", step=3, attempt=0).replace(
        **{"run.steps": 6, "distributed.max_restarts": 1})
    handle = start_run(cfg)
    pids = _finish(handle)
    s = handle.summary()
    assert s["status"] == "completed", (s, handle.log_tail())
    steps = [r for r in read_events(handle.run_dir) if r["event"] == "step"]
    assert {(r["attempt"], r["rank"]) for r in steps} >= {(0, 0), (1, 0), (1, 1)}
    last = {(r["attempt"], r["rank"]): r["step"] for r in steps}
    assert last[(1, 0)] == last[(1, 1)] == 6  # the second attempt trained to the end
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
    cmd = [sys.executable, "-m", "workbench", "run", "--preset", "smoke", "--nproc", "2",
           "--model", faulty_model(tmp_path), "--set", 'model.kwargs={"mode": "slow"}',
           "--steps", "100000", "--run-dir", str(run_dir)]
    cli = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_steps(run_dir, ranks=2)
    pids = run_pids(cli.pid, run_dir)
    cli.send_signal(signal.SIGINT)
    out, err = cli.communicate(timeout=30)
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
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(cfg_path), str(run_dir)],
                              stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    supervisor = int(parent.stdout.readline())
    wait_for_steps(run_dir, ranks=2)
    pids = run_pids(supervisor, run_dir)
    assert len(pids) >= 4  # supervisor, torchrun, two ranks
    parent.kill()
    parent.wait()
    took = assert_all_gone(pids, within=10)
    print(f"every process gone {took:.2f} s after the parent was killed")
    wait_for(lambda: (run_dir / "summary.json").is_file() and json.loads(
        (run_dir / "summary.json").read_text()).get("status") == "stopped", 5, "summary")
    assert "exited" in json.loads((run_dir / "summary.json").read_text())["message"]
