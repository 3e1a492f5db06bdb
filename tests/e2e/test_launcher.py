"""The Launcher owns what runs leave between them, and says what really ran: a config is checked
once between the widgets and the ranks, and the panel shows the command that ran, warm or cold."""

from __future__ import annotations

import html
import shlex

from workbench.config import RunConfig, _Section
from workbench.runfolder import RunFolder
from workbench.ui.controls import Controls
from workbench.ui.distributed import DistributedPanel


def test_a_config_is_checked_once_between_the_widgets_and_the_ranks(monkeypatch, fresh_launcher):
    controls = Controls(RunConfig.smoke().replace(**{"run.threads": 1, "run.eval_batches": 0}))
    controls.set(steps=3, precision="fp32")
    counts: dict[str, int] = {}
    original = _Section._validate

    def counted(self):
        counts[type(self).__name__] = counts.get(type(self).__name__, 0) + 1
        return original(self)

    monkeypatch.setattr(_Section, "_validate", counted)
    cfg = controls.config()
    handle = fresh_launcher.start(fresh_launcher.plan(cfg))
    assert handle.wait(180) == 0
    assert len(counts) == 10 and set(counts.values()) == {1}, counts  # every section, once
    assert RunFolder(handle.run_dir).config() == cfg  # what the ranks read back (once, in each rank)


def test_the_panel_shows_the_command_that_ran_cold_and_then_warm(fresh_launcher):
    cfg = RunConfig.smoke().replace(**{"run.threads": 1, "run.eval_batches": 0})
    panel = DistributedPanel(cfg)
    assert panel.launcher is fresh_launcher  # the kernel's launcher, which holds the spares
    shown = []
    for _ in range(2):
        handle = panel.run(nproc=1, steps=3, wait=True, timeout=180)
        assert panel.result["status"] == "completed", panel.result
        launch = RunFolder(handle.run_dir).launch()
        assert launch["command"] == handle.command  # the record and the handle agree
        assert html.escape(shlex.join(handle.command)) in panel.command.value
        shown.append((handle.warm, handle.command, panel.command.value))
        fresh_launcher.wait_ready(120)  # the spare the first run left behind has warmed up
    (cold, cold_cmd, cold_text), (warm, warm_cmd, warm_text) = shown
    assert not cold and "--config" in cold_cmd and "started cold" in cold_text
    assert warm and "--warm" in warm_cmd and "a spare took the run" in warm_text
