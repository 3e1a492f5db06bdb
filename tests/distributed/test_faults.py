"""The fault diagnosis on recorded events and torchrun's log: which rank raised, which was killed,
which node was lost, and a run where no rank ever started."""

from __future__ import annotations

import time

from workbench.events import NODE
from workbench.distributed.faults import diagnose, is_knock_on, torchrun_exit_codes
from recorded_events import write_events


def test_diagnosis_prefers_the_rank_that_raised_over_knock_on_errors(tmp_path):
    write_events(
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
    write_events(
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
    write_events(
        tmp_path,
        0,
        ("start", {}),
        ("step", {"step": 3}),
        ("error", {"status": "stopped", "error_type": "RunStopped", "message": "SIGTERM"}),
    )
    write_events(tmp_path, 1, ("start", {}), ("step", {"step": 3}))
    log = "  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 77)\n"
    assert torchrun_exit_codes(log) == {1: -9}
    d = diagnose(tmp_path, 1, log)
    assert d["cause"] == "killed" and d["failed_rank"] == 1 and "out of memory" in d["message"]
    assert is_knock_on({"error_type": "RuntimeError", "message": "Timed out waiting 3000ms for recv"})


def test_diagnosis_names_the_node_srun_lost_by_a_signal_or_a_node_failure_and_only_then(tmp_path):
    write_events(
        tmp_path,
        0,
        ("start", {NODE: "node0"}),
        ("step", {"step": 3}),
        ("error", {"status": "stopped", "error_type": "RunStopped", "message": "SIGTERM"}),
    )
    write_events(tmp_path, 1, ("start", {NODE: "node1"}), ("step", {"step": 3}))
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


def test_diagnosis_when_no_rank_ever_started(tmp_path):
    log = (
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: "
        "The connection to the C10d store has failed.\n"
    )
    d = diagnose(tmp_path, 1, log)
    assert d["cause"] == "rendezvous" and "before any rank started" in d["message"]
    assert "RendezvousConnectionError" in d["message"]
