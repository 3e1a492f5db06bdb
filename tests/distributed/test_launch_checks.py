"""Launcher checks that need no processes: bad inputs refused before launch, the torchrun command,
the watchdog and the fault diagnosis on recorded events."""

from __future__ import annotations

import json
import time

import pytest

from workbench.config import ConfigError, RunConfig
from workbench.events import NODE, EventWriter
from workbench.distributed.faults import diagnose, is_knock_on, torchrun_exit_codes
from workbench.distributed.launch import check_launch, start_run, worker_command
from workbench.distributed.watchdog import Watchdog


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("distributed.nproc", 0, r"distributed.nproc must be >= 1, got 0"),
        ("distributed.nproc", -2, r"distributed.nproc must be >= 1, got -2"),
        ("distributed.backend", "mpi", r"distributed.backend must be one of 'auto', 'gloo', 'nccl'"),
        ("distributed.rdzv_endpoint", "node0", r"distributed.rdzv_endpoint must be 'host:port'"),
        ("distributed.rdzv_endpoint", "node0:99999", r"distributed.rdzv_endpoint must be 'host:port'"),
        ("distributed.rdzv_endpoint", ":29500", r"distributed.rdzv_endpoint must be 'host:port'"),
    ],
)
def test_bad_distributed_values_are_refused(smoke, field, value, match):
    with pytest.raises(ConfigError, match=match):
        smoke.replace(**{field: value})


def test_node_rank_out_of_range_and_missing_endpoint(smoke):
    with pytest.raises(ConfigError, match=r"distributed.node_rank must be in \[0, 1\] for nnodes=2, got 2"):
        smoke.replace(
            **{
                "distributed.nnodes": 2,
                "distributed.node_rank": 2,
                "distributed.rdzv_endpoint": "10.0.0.1:29500",
            }
        )
    with pytest.raises(ConfigError, match=r"distributed.rdzv_endpoint is needed"):
        smoke.replace(**{"distributed.nnodes": 2})


def test_nccl_needs_a_gpu_per_rank(smoke, monkeypatch, runs_root):
    import torch

    cfg = smoke.replace(**{"distributed.backend": "nccl", "distributed.nproc": 2, "run.device": "cpu"})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"'nccl' needs CUDA GPUs, found none"):
        start_run(cfg)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match=r"distributed.nproc must be <= 1 .*GPUs.*got 2"):
        start_run(cfg)
    assert not runs_root.exists() or not any(runs_root.iterdir())  # refused before anything is written
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    check_launch(cfg)  # as many GPUs as ranks: fine


def test_single_node_command_is_loopback_with_a_fresh_port(smoke, tmp_path):
    cfg = smoke.replace(**{"distributed.nproc": 2, "distributed.max_restarts": 1})
    a, b = worker_command(cfg, tmp_path), worker_command(cfg, tmp_path)
    text = " ".join(a)
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in a and "GLOO_SOCKET_IFNAME=lo" in a
    assert "--local-addr 127.0.0.1" in text and "--max-restarts=1" in text
    assert f"--log-dir={tmp_path / 'torchrun_logs'}" in a
    endpoint = [x for x in a if x.startswith("--rdzv-endpoint=127.0.0.1:")]
    assert endpoint and endpoint != [x for x in b if x.startswith("--rdzv-endpoint=")]
    assert worker_command(smoke, tmp_path)[1:3] == ["-m", "workbench.worker"]  # one rank: no torchrun


def test_multi_node_command_uses_the_users_endpoint(smoke, tmp_path):
    cfg = smoke.replace(
        **{
            "distributed.nnodes": 2,
            "distributed.node_rank": 1,
            "distributed.nproc": 4,
            "distributed.rdzv_endpoint": "node0.cluster:29400",
        }
    )
    cmd = worker_command(cfg, tmp_path)
    assert "workbench.loopback" in cmd and "--local-addr" not in cmd  # the agent binds its store
    assert {
        "--nnodes=2",
        "--node-rank=1",
        "--nproc-per-node=4",
        "--rdzv-endpoint=node0.cluster:29400",
    } <= set(cmd)


def _write(run_dir, rank, *records, attempt=0):
    w = EventWriter(run_dir, rank, attempt)
    for event, fields in records:
        w.write(event, **fields)
    w.close()


def test_watchdog_names_missing_and_stalled_ranks(tmp_path, smoke):
    cfg = smoke.replace(
        **{
            "distributed.nproc": 2,
            "distributed.start_timeout_s": 5.0,
            "distributed.timeout_s": 2.0,
            "run.steps": 100,
        }
    )
    dog = Watchdog(tmp_path, cfg)
    assert dog.check(now=dog.t0 + 1) is None
    failure = dog.check(now=dog.t0 + 6)
    assert failure.cause == "start_timeout" and "rendezvous" in failure.message
    _write(tmp_path, 0, ("start", {}), ("ready", {}), ("step", {"step": 1}))
    _write(tmp_path, 1, ("start", {}), ("ready", {}), ("step", {"step": 1}))
    now = time.time()
    assert Watchdog(tmp_path, cfg).check(now=now + 1) is None
    _write(tmp_path, 0, ("step", {"step": 2}))
    _write(tmp_path, 1, ("heartbeat", {"step": 1, "where": "forward (model.py:12)"}))
    failure = Watchdog(tmp_path, cfg).check(now=time.time() + 7.5)
    assert failure.cause == "stalled" and 1 in failure.failed_ranks
    assert "rank 1 stalled after step 1" in failure.message


def test_the_watchdog_and_the_post_mortem_say_a_stall_alike(tmp_path, smoke):
    """One Diagnosis, one wording of a stalled rank, one error type derived from the cause: what
    the watchdog finds while the run goes reads as the rule table's diagnosis after it."""
    from workbench.distributed.faults import finish_summary

    cfg = smoke.replace(**{"distributed.nproc": 2, "distributed.timeout_s": 2.0, "run.steps": 100})
    _write(tmp_path, 0, ("start", {}), ("ready", {}), ("step", {"step": 1}), ("step", {"step": 2}))
    _write(
        tmp_path,
        1,
        ("start", {}),
        ("ready", {}),
        ("step", {"step": 1}),
        ("heartbeat", {"step": 1, "where": "forward (model.py:12)"}),
    )
    live = Watchdog(tmp_path, cfg).check(now=time.time() + 7.5)
    assert (live.cause, live.error_type, live.failed_rank) == ("stalled", "Stalled", live.failed_ranks[0])
    assert 1 in live.failed_ranks
    assert "rank 1 stalled after step 1: no progress for" in live.message
    assert "last seen in forward (model.py:12)" in live.message
    # the same stall found after the run: rank 0 timed out waiting, rank 1 was stopped
    _write(
        tmp_path,
        0,
        (
            "error",
            {"status": "failed", "error_type": "DistBackendError", "message": "Timed out waiting for recv"},
        ),
    )
    _write(tmp_path, 1, ("error", {"status": "stopped", "error_type": "RunStopped", "message": "SIGTERM"}))
    after = diagnose(tmp_path, 1)
    assert (after["cause"], after["error_type"], after["failed_rank"]) == ("stalled", "Stalled", 1)
    assert after["message"].startswith("rank 1 stalled after step 1, last seen in forward (model.py:12)")
    summary = finish_summary(tmp_path, 2, -9, failure=live)
    assert {k: summary[k] for k in ("status", "cause", "error_type", "failed_rank", "failed_ranks")} == {
        "status": "failed",
        "cause": "stalled",
        "error_type": "Stalled",
        "failed_rank": live.failed_rank,
        "failed_ranks": live.failed_ranks,
    }
    assert summary["message"] == live.message


def test_diagnosis_prefers_the_rank_that_raised_over_knock_on_errors(tmp_path):
    _write(
        tmp_path,
        0,
        ("start", {}),
        ("step", {"step": 1}),
        (
            "error",
            {
                "status": "failed",
                "error_type": "DistBackendError",
                "message": "Connection closed by peer [127.0.0.1]:4242",
            },
        ),
    )
    time.sleep(0.01)
    _write(
        tmp_path,
        1,
        ("start", {}),
        ("step", {"step": 1}),
        ("error", {"status": "failed", "error_type": "ValueError", "message": "bad shape"}),
    )
    (tmp_path / "rank1.traceback.txt").write_text("Traceback ...\nValueError: bad shape\n")
    d = diagnose(tmp_path, 1)
    assert d["cause"] == "raised" and d["failed_rank"] == 1
    assert "ValueError: bad shape" in d["traceback"] and "Connection closed" not in d["message"]


def test_diagnosis_of_a_silent_rank_is_a_kill(tmp_path):
    _write(
        tmp_path,
        0,
        ("start", {}),
        ("step", {"step": 3}),
        ("error", {"status": "stopped", "error_type": "RunStopped", "message": "SIGTERM"}),
    )
    _write(tmp_path, 1, ("start", {}), ("step", {"step": 3}))
    log = "  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 77)\n"
    assert torchrun_exit_codes(log) == {1: -9}
    d = diagnose(tmp_path, 1, log)
    assert d["cause"] == "killed" and d["failed_rank"] == 1 and "out of memory" in d["message"]
    assert is_knock_on({"error_type": "RuntimeError", "message": "Timed out waiting 3000ms for recv"})


def test_diagnosis_names_the_node_srun_lost_by_a_signal_or_a_node_failure_and_only_then(tmp_path):
    _write(
        tmp_path,
        0,
        ("start", {NODE: "node0"}),
        ("step", {"step": 3}),
        ("error", {"status": "stopped", "error_type": "RunStopped", "message": "SIGTERM"}),
    )
    _write(tmp_path, 1, ("start", {NODE: "node1"}), ("step", {"step": 3}))
    killed = (
        "srun: error: node1: task 1: Killed\nsrun: launch/slurm: _step_signal: Terminating "
        "StepId=4.0\nsrun: error: node0: task 0: Terminated\n"
    )
    # the node went silent (its link cut): slurmctld set it DOWN and srun said so first
    cut = (
        "srun: error: Node failure on node1\nsrun: Job step aborted: Waiting up to 32 seconds "
        "for job step to finish.\nsrun: error: node0: task 0: Terminated\n"
    )
    for code, log, how in (
        (137, killed, "srun's task 1 there (its torchrun agent) was killed"),
        (0, cut, "SLURM found it not answering and set it DOWN"),
    ):
        d = diagnose(tmp_path, code, log)
        assert d["cause"] == "node_lost" and d["failed_rank"] == 1
        assert d["message"].startswith(f"lost node node1: {how} after step 3, and its rank(s) 1 with it")
    exited = "srun: error: node1: task 1: Exited with exit code 1\n"  # torchrun reported a failure
    assert diagnose(tmp_path, 1, exited)["cause"] == "killed"


def test_cli_flags_build_the_distributed_section():
    import argparse

    from workbench.cli import run as cli_run

    parser = argparse.ArgumentParser()
    cli_run.add_parser(parser.add_subparsers())
    args = parser.parse_args(
        [
            "run",
            "--preset",
            "smoke",
            "--nproc",
            "2",
            "--nnodes",
            "2",
            "--node-rank",
            "1",
            "--rdzv-endpoint",
            "10.1.2.3:29400",
            "--backend",
            "gloo",
            "--max-restarts",
            "1",
        ]
    )
    d = cli_run.build_config(args).distributed
    assert (d.nproc, d.nnodes, d.node_rank, d.rdzv_endpoint, d.backend, d.max_restarts) == (
        2,
        2,
        1,
        "10.1.2.3:29400",
        "gloo",
        1,
    )
    bad = parser.parse_args(["run", "--nnodes", "2", "--node-rank", "5", "--rdzv-endpoint", "h:1"])
    with pytest.raises(ConfigError, match="distributed.node_rank"):
        cli_run.build_config(bad)
    assert json.loads(RunConfig.smoke().to_json())["distributed"]["timeout_s"] > 0


def test_diagnosis_when_no_rank_ever_started(tmp_path):
    log = (
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: "
        "The connection to the C10d store has failed.\n"
    )
    d = diagnose(tmp_path, 1, log)
    assert d["cause"] == "rendezvous" and "before any rank started" in d["message"]
    assert "RendezvousConnectionError" in d["message"]


def test_heartbeat_says_where_the_main_thread_is(tmp_path):
    from workbench.events import read_events
    from workbench.train.heartbeat import Heartbeat, LockedWriter

    writer = LockedWriter(tmp_path, 0, 0)
    writer.write("step", step=7)
    beat = Heartbeat(writer, interval_s=0.05)
    beat.start()

    def busy_in_forward():
        time.sleep(0.3)

    busy_in_forward()
    beat.stop()
    beat.join(2)
    writer.close()
    beats = [r for r in read_events(tmp_path) if r["event"] == "heartbeat"]
    assert beats and beats[-1]["step"] == 7
    assert any(r["where"].startswith("busy_in_forward (test_launch_checks.py:") for r in beats)


def test_saving_for_a_restart_across_nodes_started_here_is_refused_and_a_resume_needs_a_state(
    smoke, tmp_path, runs_root
):
    two = smoke.replace(
        **{"distributed.nnodes": 2, "distributed.rdzv_endpoint": "127.0.0.1:29500", "run.save_every": 5}
    )
    with pytest.raises(
        ConfigError,
        match=r"run.save_every=5 with distributed.nnodes=2 is not "
        r"allowed here: each node .*\(workbench submit",
    ):
        start_run(two)
    with pytest.raises(ConfigError, match=r"run.resume_from '.*' holds no resumable state"):
        start_run(smoke.replace(**{"run.resume_from": str(tmp_path)}))
    assert not runs_root.exists() or not any(runs_root.iterdir())  # refused before anything is written
