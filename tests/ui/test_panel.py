"""RunPanel end to end with a real worker process: Run from code, live charts fill, Stop ends the
run within seconds, the charts and status say so, events are kept and the history lists it."""

from __future__ import annotations

import time

import pytest

from workbench.config import RunConfig
from workbench.events import read_events
from workbench.ui import RunPanel


def _wait_for(cond, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_run_then_stop_from_the_panel():
    panel = RunPanel(RunConfig.smoke().replace(**{"run.device": "cpu"}))
    try:
        handle = panel.run(precision="bf16", steps=1_000_000)
        assert handle is not None
        assert panel.run_button.disabled and not panel.stop_button.disabled
        loss = panel.dashboard.charts.figures["loss"]
        _wait_for(lambda: loss.data and len(loss.data[0].x) >= 5, 120, "steps on the loss chart")
        n = len(loss.data[0].x)
        _wait_for(lambda: len(loss.data[0].x) > n, 30, "the chart to gain points")
        assert panel.progress.value > 0
        t0 = time.monotonic()
        panel.stop_button.click()
        assert panel.wait(30), "the run did not end after Stop"
        assert time.monotonic() - t0 < 10
        assert not handle.running()
        assert panel.dashboard.series.status == "stopped"
        assert loss.layout.title.text.startswith("Loss · stopped at step")
        assert "stopped" in panel.status.value and not panel.run_button.disabled
        events = read_events(handle.run_dir)
        assert events[-1]["event"] == "error" and events[-1]["status"] == "stopped"
        assert sum(e["event"] == "step" for e in events) >= n
        assert panel.run_dirs == [handle.run_dir]
        assert handle.run_dir.name in panel.history.table.value
        assert panel.history.frame["status"].tolist() == ["stopped"]
        assert not panel.monitor.running
    finally:
        panel.close()


def test_a_bad_setting_shows_in_the_status_line_and_starts_nothing():
    panel = RunPanel(RunConfig.smoke().replace(**{"run.device": "cpu", "model.width": 30}))
    panel.controls.model.value = "cnn"
    panel.controls.toggles["channels_last"].value = True
    panel.controls.model.value = "transformer"  # width 30 is not a multiple of 4 heads
    assert panel.controls.toggles["channels_last"].value is False  # switched off with the model
    panel.run()
    assert panel.handle is None
    assert "cannot run: model.width must be a multiple of model.heads" in panel.status.value
    panel.close()
