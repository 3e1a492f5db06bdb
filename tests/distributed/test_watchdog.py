"""The watchdog on recorded events: missing and stalled ranks named, in the post-mortem's words."""

from __future__ import annotations

import time

from workbench.distributed.faults import diagnose
from workbench.distributed.watchdog import Watchdog
from recorded_events import write_events


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
    write_events(tmp_path, 0, ("start", {}), ("ready", {}), ("step", {"step": 1}))
    write_events(tmp_path, 1, ("start", {}), ("ready", {}), ("step", {"step": 1}))
    now = time.time()
    assert Watchdog(tmp_path, cfg).check(now=now + 1) is None
    write_events(tmp_path, 0, ("step", {"step": 2}))
    write_events(tmp_path, 1, ("heartbeat", {"step": 1, "where": "forward (model.py:12)"}))
    failure = Watchdog(tmp_path, cfg).check(now=time.time() + 7.5)
    assert failure.cause == "stalled" and 1 in failure.failed_ranks
    assert "rank 1 stalled after step 1" in failure.message


def test_the_watchdog_and_the_post_mortem_say_a_stall_alike(tmp_path, smoke):
    """One Diagnosis, one wording of a stalled rank, one error type derived from the cause: what
    the watchdog finds while the run goes reads as the rule table's diagnosis after it."""
    from workbench.distributed.faults import finish_summary

    cfg = smoke.replace(**{"distributed.nproc": 2, "distributed.timeout_s": 2.0, "run.steps": 100})
    write_events(tmp_path, 0, ("start", {}), ("ready", {}), ("step", {"step": 1}), ("step", {"step": 2}))
    write_events(
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
    write_events(
        tmp_path,
        0,
        (
            "error",
            {"status": "failed", "error_type": "DistBackendError", "message": "Timed out waiting for recv"},
        ),
    )
    write_events(
        tmp_path, 1, ("error", {"status": "stopped", "error_type": "RunStopped", "message": "SIGTERM"})
    )
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


def test_a_rank_still_finishing_beside_one_that_is_done_is_not_stalled(tmp_path, smoke):
    """Rank 1 wrote done while rank 0, past its last step, still saves the weights (slow on a busy
    machine): nobody failed, so nobody is waited for and nobody is stalled."""
    cfg = smoke.replace(**{"distributed.nproc": 2, "distributed.timeout_s": 2.0, "run.steps": 40})
    t = time.time()
    for rank in (0, 1):
        write_events(
            tmp_path, rank, ("start", {"t": t}), ("ready", {"t": t}), ("step", {"step": 40, "t": t + 1})
        )
    write_events(
        tmp_path, 0, ("heartbeat", {"step": 40, "where": "memory_per_rank (trainer.py:429)", "t": t + 60})
    )
    write_events(tmp_path, 1, ("done", {"t": t + 30}))
    assert Watchdog(tmp_path, cfg).check(now=t + 61) is None


def test_the_patience_follows_the_step_times_seen_and_is_said(tmp_path, smoke):
    """Steps 4 s apart (a loaded machine): 12 s without progress is a slow step, not a stall; at
    5x the slowest step the rank is stalled, and the diagnosis says what patience it was given."""
    cfg = smoke.replace(**{"distributed.nproc": 1, "distributed.timeout_s": 2.0, "run.steps": 100})
    t = time.time()
    steps = [("step", {"step": i, "t": t + 4 * i}) for i in range(1, 4)]
    write_events(tmp_path, 0, ("start", {"t": t}), ("ready", {"t": t}), *steps)
    last = t + 12
    assert Watchdog(tmp_path, cfg).check(now=last + 12) is None
    failure = Watchdog(tmp_path, cfg).check(now=last + 21)
    assert (
        failure.cause == "stalled"
        and "the patience was 20 s without progress: 5x its slowest step" in failure.message
    )


def _held_in_a_collective(tmp_path, t, rank1_part="forward"):
    """Rank 0 finished step 5 and waits in the backward of step 6 (DDP's all-reduce); rank 1
    finished step 5 half a second later and is in `rank1_part` of step 6."""
    for rank, late, part, where in (
        (0, 0.0, "backward", "train_step (step.py:91)"),
        (1, 0.5, rank1_part, "forward (model.py:12)"),
    ):
        steps = [("step", {"step": i, "t": t + i + late}) for i in range(1, 6)]
        beat = ("heartbeat", {"step": 5, "where": where, "part": part, "t": t + 30})
        write_events(tmp_path, rank, ("start", {"t": t}), ("ready", {"t": t}), *steps, beat)


def test_a_rank_held_in_a_collective_by_a_slow_peer_is_not_the_stalled_one(tmp_path, smoke):
    """Rank 1 stopped in its forward; rank 0, a part further on, waits for it in backward. Rank 0
    went without progress first, but only rank 1 is judged: nothing is said until rank 1 is past
    its patience (7 s: the collective timeout and its margin), then rank 1 alone is named, and
    rank 0 is said to wait for it."""
    cfg = smoke.replace(**{"distributed.nproc": 2, "distributed.timeout_s": 2.0, "run.steps": 100})
    t = time.time()
    _held_in_a_collective(tmp_path, t)
    assert Watchdog(tmp_path, cfg).check(now=t + 5 + 7.2) is None  # rank 0 past 7 s, rank 1 not
    failure = Watchdog(tmp_path, cfg).check(now=t + 5.5 + 7.2)
    assert failure.cause == "stalled" and failure.failed_ranks == [1], failure
    assert failure.message.startswith("rank 1 stalled after step 5: no progress for 7 s"), failure.message
    assert "last seen in forward (model.py:12)" in failure.message
    assert "rank 0 waits for it in the backward of step 6 (a collective)" in failure.message


def test_ranks_level_in_the_steps_are_both_named(tmp_path, smoke):
    """Both ranks in the backward of step 6: neither can be told to wait for the other, so both
    are named, as are ranks whose heartbeats do not say their part (a script's own loop)."""
    cfg = smoke.replace(**{"distributed.nproc": 2, "distributed.timeout_s": 2.0, "run.steps": 100})
    t = time.time()
    _held_in_a_collective(tmp_path, t, rank1_part="backward")
    failure = Watchdog(tmp_path, cfg).check(now=t + 5.5 + 7.2)
    assert failure.failed_ranks == [0, 1] and "waits for" not in failure.message, failure
