"""RunPanel: the control panel. Pick settings, press Run, watch the live charts and the system
monitor, press Stop; every finished run joins the comparison table under the charts.

    panel = RunPanel(RunConfig.default()); panel            # in a notebook cell
    panel.run(precision="bf16", wait=True)                  # the Run button, from code
"""
from __future__ import annotations

import html
import threading

import ipywidgets as widgets
import torch

from ..config import ConfigError, RunConfig
from ..launch import RunHandle, start_run
from .compare import CompareView
from .controls import Controls
from .dashboard import LiveDashboard
from .monitor import SystemMonitor
from .monitor_view import MonitorView
from .recommend import recommend_precision
from .series import RunSeries


class RunPanel:
    """Controls, Run/Stop, progress and status, the live dashboard, the monitor, the run history."""

    def __init__(self, cfg: RunConfig | None = None):
        self.controls = Controls(cfg or RunConfig.default())
        self.run_button = widgets.Button(description="Run", button_style="success", icon="play",
                                         tooltip="start a run with these settings")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop",
                                          disabled=True, tooltip="stop the run (its events are kept)")
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="progress",
                                            layout=widgets.Layout(width="360px"))
        self.status = widgets.HTML("<span class='wb-panel-status'>ready</span>")
        dtype, reason = recommend_precision(torch.device(self.controls.device.value))
        self.recommendation = widgets.HTML(
            f"<span class='wb-recommendation'>Recommended here: <b>{dtype}</b> — "
            f"{html.escape(reason)}</span>")
        self.dashboard = LiveDashboard()
        self.dashboard.on_update(self._on_update)
        self.dashboard.on_finish(self._on_finish)
        self.monitor_view = MonitorView()
        self.monitor = SystemMonitor(self.monitor_view.update)
        self.history = CompareView(picker=False)
        self.handle: RunHandle | None = None
        self.run_dirs: list = []
        self._finished = threading.Event()
        self._finished.set()
        self.run_button.on_click(lambda _: self._start())
        self.stop_button.on_click(lambda _: self.stop())
        self.widget = widgets.VBox([
            self.controls.widget, self.recommendation,
            widgets.HBox([self.run_button, self.stop_button, self.progress]), self.status,
            self.dashboard.widget, self.monitor_view.widget,
            widgets.HTML("<b>Runs from this panel</b>"), self.history.widget],
            layout=widgets.Layout(border="1px solid #ddd", padding="6px"))

    # --- actions ------------------------------------------------------------------------------
    def run(self, wait: bool = False, timeout: float | None = None, **settings) -> RunHandle | None:
        """Set controls (precision="bf16", steps=50, ...) and press Run. With wait=True, return
        once the run has ended and the charts and table show its end."""
        if settings:
            self.controls.set(**settings)
        self._start()
        if wait and self.handle is not None:
            self.wait(timeout)
        return self.handle

    def _start(self) -> None:
        if not self._finished.is_set():
            self._set_status("a run is going: stop it first", error=True)
            return
        try:
            cfg = self.controls.config()
            handle = start_run(cfg)
        except ConfigError as e:
            self._set_status(f"cannot run: {e}", error=True)
            return
        self.handle = handle
        self._finished.clear()
        self.run_button.disabled, self.stop_button.disabled = True, False
        self.progress.max, self.progress.value = cfg.run.steps, 0
        self.progress.bar_style = ""
        self._set_status(f"running {handle.run_dir.name}")
        self.monitor.start(pids=[handle.proc.pid])
        self.dashboard.watch(handle.run_dir, cfg.distributed.world_size, cfg.run.steps,
                             alive=handle.running)

    def stop(self) -> None:
        """Stop the current run (SIGTERM, then SIGKILL after a grace period); events are kept."""
        if self.handle is not None and self.handle.running():
            self._set_status("stopping ...")
            self.stop_button.disabled = True
            self.handle.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the current run has ended and its end is drawn. True if it has."""
        return self._finished.wait(timeout)

    def close(self) -> None:
        """Stop the run, the tailer and the monitor, and close the widgets."""
        self.stop()
        self.dashboard.stop()
        self.monitor.stop()
        _close_tree(self.widget)

    # --- callbacks from the dashboard thread ---------------------------------------------------
    def _on_update(self, s: RunSeries) -> None:
        self.progress.value = min(s.last_step, self.progress.max)

    def _on_finish(self, s: RunSeries) -> None:
        self.monitor.stop()
        if self.handle is not None:
            try:
                self.handle.wait(10)  # reap the worker so no zombie is left
            except Exception:
                pass
            self.run_dirs.append(self.handle.run_dir)
            self.history.add(self.handle.run_dir)
        self.progress.bar_style = {"completed": "success"}.get(s.status, "danger")
        self._set_status(f"{s.status}: {s.message}" if s.message else s.status,
                         error=s.status != "completed")
        self.run_button.disabled, self.stop_button.disabled = False, True
        self._finished.set()

    def _set_status(self, text: str, error: bool = False) -> None:
        color = "#d62728" if error else "#333"
        self.status.value = (f"<span class='wb-panel-status' style='color:{color}'>"
                             f"{html.escape(text)}</span>")

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


def _close_tree(widget) -> None:
    """Close a widget and everything inside it (closing a box leaves its children open)."""
    for child in getattr(widget, "children", ()):
        _close_tree(child)
    widget.close()
