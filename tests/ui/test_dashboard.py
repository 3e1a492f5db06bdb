"""LiveDashboard and LiveCharts without a browser or kernel: feed records, check the figures'
data and that redraws are throttled whatever the step rate."""

from __future__ import annotations

import threading
import time

from ui_records import lifecycle, step_records

from workbench.events import EventWriter
from workbench.ui import LiveDashboard, attach
from workbench.ui.charts import MAX_POINTS, thin


def _xs(dash, name):
    return [list(t.x) for t in dash.charts.figures[name].data if len(t.x)]


def test_feed_draws_one_trace_per_rank_and_a_total():
    dash = LiveDashboard(world_size=2)
    dash.feed(lifecycle(2) + step_records(20, rank=0) + step_records(20, rank=1, mfu=0.125))
    assert dash.maybe_redraw(now=True)
    loss = dash.charts.figures["loss"].data
    assert [t.name for t in loss] == ["rank 0", "rank 1"]
    assert list(loss[0].x) == list(range(1, 21))
    assert list(loss[0].y)[0] == 2.0
    sps = dash.charts.figures["samples_per_s"].data
    assert [t.name for t in sps] == [
        "rank 0",
        "rank 0 (median of 25)",
        "rank 1",
        "rank 1 (median of 25)",
        "total",
        "total (median of 25)",
    ]
    assert list(sps[4].y)[0] == 201.0 and sps[4].mode == "markers" and sps[5].mode == "lines"
    assert [t.name for t in dash.charts.figures["memory"].data] == ["rank 0 RSS", "rank 1 RSS"]
    text = dash.readout.value
    assert "waited for data 40% of the time" in text and "MFU 12.5%" in text
    assert "201 samples/s total" in text


def test_redraws_are_throttled_with_a_fake_clock():
    now = [0.0]
    dash = LiveDashboard(clock=lambda: now[0], max_redraws_per_s=4)
    base = dash.redraws
    for i in range(1, 1001):  # 1000 steps in 2 s: 500 steps/s
        dash.feed(step_records(1, start=i))
        dash.maybe_redraw()
        now[0] += 0.002
    drawn = dash.redraws - base
    assert 7 <= drawn <= 9, drawn  # 4/s over 2 s
    dash.maybe_redraw(now=True)
    assert list(dash.charts.figures["loss"].data[0].x)[-1] == 1000
    assert dash.maybe_redraw(now=True) is False  # nothing new: no redraw


def test_a_live_runs_redraws_send_the_whole_figure_copy_now_and_then_and_at_the_end():
    """A page on a busy machine fell behind a live run: each redraw sent every trace twice (the
    update, then the copy a new view starts from). Throttled redraws now send the copy after a
    change of names or styles and every PUBLISH_EVERY_S; a redraw `now` (the end) always does."""
    from workbench.ui.charts import PUBLISH_EVERY_S

    now = [0.0]
    dash = LiveDashboard(clock=lambda: now[0], max_redraws_per_s=4)
    loss = dash.charts.figures["loss"]
    copies = []
    loss.observe(lambda change: copies.append(now[0]), names="_widget_data")
    for i in range(1, 81):  # 80 steps over 20 s, 4 a second
        dash.feed(step_records(1, start=i))
        dash.maybe_redraw()
        now[0] += 0.25
    assert dash.redraws >= 60
    assert copies[0] == 0.0  # the first step names the trace: a change of styles
    gaps = [b - a for a, b in zip(copies, copies[1:])]
    assert len(copies) <= 20 / PUBLISH_EVERY_S + 2 and min(gaps) >= PUBLISH_EVERY_S, copies
    assert list(loss._widget_data[0]["x"])[-1] < 80  # the copy lags; the update does not
    assert list(loss.data[0].x)[-1] == 80
    dash.feed(step_records(1, start=81))
    dash.maybe_redraw(now=True)
    assert list(loss._widget_data[0]["x"])[-1] == 81  # the end is in the copy


def test_tailer_thread_throttles_a_fast_writer(tmp_path):
    writer = EventWriter(tmp_path, rank=0)
    dash = LiveDashboard(tmp_path, total_steps=4000, poll_s=0.02).start()
    t0 = time.monotonic()
    for i in range(1, 4001):  # as fast as it can write: thousands of steps a second
        writer.write("step", step=i, loss=1.0 / i, step_time_ms=0.1, data_wait_ms=0.0, samples_per_s=1e4)
        if i % 200 == 0:
            time.sleep(0.05)  # spread the writes over about a second
    writer.write("done", samples_per_s=1e4)
    writer.close()
    assert dash.wait(10)
    elapsed = time.monotonic() - t0
    assert dash.series.status == "completed"
    assert dash.redraws <= 4 * elapsed + 3, (dash.redraws, elapsed)
    assert list(dash.charts.figures["loss"].data[0].x)[-1] == 4000
    assert len(dash.charts.figures["loss"].data[0].x) <= MAX_POINTS + 1


def test_stopped_run_shows_in_titles_and_status(tmp_path):
    dash = LiveDashboard(tmp_path)
    dash.feed(
        step_records(7)
        + [
            {
                "event": "error",
                "rank": 0,
                "t": 2e3,
                "status": "stopped",
                "message": "stopped by signal SIGTERM",
            }
        ]
    )
    dash.maybe_redraw(now=True)
    assert dash.charts.figures["loss"].layout.title.text == "Loss · stopped at step 7"
    assert "stopped" in dash.header.value


def test_amp_health_readout():
    dash = LiveDashboard()
    dash.feed(step_records(3, grad_scale=65536.0, skipped_steps=2, nonfinite_losses=1))
    dash.maybe_redraw(now=True)
    assert "AMP health: grad scale 65536, skipped steps 2, non-finite losses 1" in dash.readout.value


def test_attach_replays_a_finished_run(tmp_path, smoke):
    from workbench.runstore import create_run_dir

    run_dir = create_run_dir(smoke.replace(**{"run.steps": 30}), tmp_path)
    w = EventWriter(run_dir, rank=0)
    w.write("start", world_size=1)
    for rec in step_records(30):
        w.write("step", **{k: v for k, v in rec.items() if k not in ("event", "t", "rank", "attempt")})
    w.write("done", samples_per_s=100.0)
    w.close()
    finished = threading.Event()
    dash = attach(run_dir, start=False)
    dash.on_finish(lambda s: finished.set())
    dash.start()
    assert finished.wait(10) and dash.series.status == "completed"
    assert list(dash.charts.figures["loss"].data[0].x) == list(range(1, 31))
    assert "step 30/30" in dash.readout.value
    dash.start()  # replaying again starts from scratch, it does not count records twice
    assert dash.wait(10)
    assert list(dash.charts.figures["loss"].data[0].x) == list(range(1, 31))


def test_attach_refuses_a_folder_that_is_not_a_run(tmp_path):
    import pytest

    from workbench.config import ConfigError

    with pytest.raises(ConfigError, match="is not a run folder"):
        attach(tmp_path)


def test_thin_keeps_the_last_point():
    xs = list(range(10_001))
    tx, ty = thin(xs, xs, max_points=100)
    assert len(tx) <= 101 and tx[-1] == 10_000 and list(tx) == list(ty)


def test_redraw_work_stays_flat_however_long_the_run():
    """What one redraw converts and sends is bounded per trace: a 20,000-step run costs about what
    a 1,000-step run does (work counted, not wall time)."""
    from workbench.ui.charts import MAX_POINTS, LiveCharts
    from workbench.ui.curve import MAX_BUCKETS
    from workbench.ui.series import RunSeries

    sent = {}
    for steps in (1_000, 20_000):
        series, charts = RunSeries(), LiveCharts()
        series.feed(step_records(steps))
        charts.redraw(series)
        sent[steps] = charts.points_sent
        traces = sum(len(f.data) for f in charts.figures.values())
        assert sent[steps] <= traces * MAX_POINTS
        assert len(charts.figures["loss"].data[0].x) < 2 * MAX_BUCKETS + 1
    assert sent[20_000] <= 2 * sent[1_000], sent


def test_the_kernel_announces_each_open_figure_before_its_model():
    """The page evaluates plotly's code only once every announced figure has set up (the code holds
    the page for seconds, and a figure still loading then misses its 2 s set-up): the count must
    follow figures opened and closed, and start again with a new shared widget."""
    import ipywidgets as W

    from workbench.ui import figure

    W.Widget.close_all()
    first, second = figure.LiveFigure(), figure.LiveFigure()
    code = figure._shared
    assert code.figures == 2
    first.close()
    first.close()  # a second close is not a second figure gone
    assert code.figures == 1
    second.close()
    code.close()
    figure.LiveFigure()
    assert figure._shared is not code and figure._shared.figures == 1
    W.Widget.close_all()
