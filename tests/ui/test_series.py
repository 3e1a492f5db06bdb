"""RunSeries and Throttle: the data behind the live charts, no widgets involved."""

from __future__ import annotations

import numpy as np
import pytest
from ui_records import lifecycle, step_records

from workbench.ui.series import RunSeries
from workbench.ui.throttle import Throttle


def test_series_per_rank_curves_and_total_throughput():
    s = RunSeries(world_size=2)
    s.feed(lifecycle(2) + step_records(10, rank=0) + step_records(10, rank=1))
    assert s.status == "running"
    assert sorted(s.ranks) == [0, 1]
    assert s.ranks[1]["loss"].xy()[0].tolist() == list(range(1, 11))
    steps, total = s.total["samples_per_s"].xy()
    assert steps.tolist() == list(range(1, 11)) and total[0] == pytest.approx(100.0 + 101.0)
    assert s.ranks[0]["rss_gib"].xy()[0].tolist() == [1, 6]
    assert s.latest("samples_per_s") == pytest.approx(201.0)


def test_total_waits_for_every_rank():
    s = RunSeries(world_size=2)
    s.feed(step_records(5, rank=0))
    assert len(s.total["samples_per_s"]) == 0
    s.feed(step_records(3, rank=1))
    assert s.total["samples_per_s"].xy()[0].tolist() == [1, 2, 3]


def test_data_wait_share_amp_health_and_mfu():
    s = RunSeries()
    s.feed(step_records(4, grad_scale=32768.0, skipped_steps=1, mfu=0.25))
    assert s.data_wait_share() == pytest.approx(0.4)
    assert s.amp == {"grad_scale": 32768.0, "skipped_steps": 1}
    assert s.mfu == 0.25


def test_stopped_failed_and_completed_status():
    stopped = RunSeries()
    stopped.feed(
        step_records(3)
        + [
            {
                "event": "error",
                "rank": 0,
                "t": 2000,
                "status": "stopped",
                "message": "stopped by signal SIGTERM",
            }
        ]
    )
    assert stopped.finished and stopped.status == "stopped"
    failed = RunSeries(world_size=2)
    failed.feed(
        [{"event": "error", "rank": 1, "t": 5, "status": "failed", "error_type": "OOM", "message": "boom"}]
    )
    assert failed.status == "failed" and failed.message == "rank 1: OOM: boom"
    done = RunSeries(world_size=2)
    done.feed([{"event": "done", "rank": 0, "t": 1, "samples_per_s": 1234.0}])
    assert not done.finished  # rank 1 still going
    done.feed([{"event": "done", "rank": 1, "t": 2}])
    assert done.status == "completed" and "1,234 samples/s" in done.message


def test_restart_attempt_replaces_the_old_curve():
    s = RunSeries()
    s.feed(step_records(5))
    s.feed([dict(r, attempt=1) for r in step_records(2)])
    assert s.ranks[0]["loss"].xy()[0].tolist() == [1, 2]


def test_exited_without_final_record():
    s = RunSeries()
    s.feed(step_records(2))
    s.mark_exited(-9)
    assert s.status == "failed" and "code -9" in s.message


def test_throttle_limits_rate_with_a_fake_clock():
    now = [0.0]
    t = Throttle(4.0, clock=lambda: now[0])
    fired = 0
    for _ in range(1000):  # 1000 checks over 10 s
        fired += t.ready()
        now[0] += 0.01
    assert 39 <= fired <= 41
    with pytest.raises(ValueError, match="max_per_s must be > 0"):
        Throttle(0)


def test_a_long_history_draws_in_bounded_work_with_its_spike_and_nan():
    from workbench.ui.curve import MAX_BUCKETS, Curve

    short, long = Curve(), Curve()
    for i in range(1000):
        short.append(i, 1.0)
    for i in range(200_000):
        long.append(i, 1.0 if i not in (123_457, 150_000) else (50.0 if i == 123_457 else float("nan")))
    assert long.buckets <= MAX_BUCKETS and short.buckets <= MAX_BUCKETS
    x, y = long.xy()
    assert len(x) <= 3 * MAX_BUCKETS  # what a redraw sends does not grow with the run
    assert 123_457 in x.tolist() and np.nanmax(y) == 50.0  # the spike survives thinning
    assert np.isnan(y).sum() == 1 and list(long.nonfinite) == [150_000]
    small = Curve()
    for i in range(10):
        small.append(i, float(i))
    assert small.xy()[1].tolist() == [float(i) for i in range(10)]  # short runs: every point


def test_throughput_has_a_rolling_median_beside_the_raw_points():
    s = RunSeries()
    recs = step_records(40)
    for i, r in enumerate(recs):
        r["samples_per_s"] = {0: 10.0, 1: 5000.0}.get(i % 7, 500.0)  # raw figures swing widely
    s.feed(recs)
    raw = s.ranks[0]["samples_per_s"].xy()[1]
    smooth = s.ranks[0]["samples_per_s_median"].xy()[1]
    assert raw.min() == 10.0 and raw.max() == 5000.0
    assert set(smooth[10:].tolist()) == {500.0}
