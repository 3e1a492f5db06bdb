"""RunPanel: the control panel. Pick settings, press Run, watch the live charts and the system
monitor, press Stop; every finished run joins the comparison table under the charts.

    panel = RunPanel(RunConfig.default()); panel            # in a notebook cell
    panel.run(precision="bf16", wait=True)                  # the Run button, from code
"""

from __future__ import annotations

import html

import ipywidgets as widgets

from ..config import ConfigError, RunConfig
from ..distributed.launch import RunHandle
from ..hardware.lessons import precision_lesson
from ..machine.monitor import SystemMonitor
from .comparison_view import CompareView
from .controls import Controls
from .monitor_view import MonitorView
from .run_control import RunControl
from .series import RunSeries
from .sizing import button


class RunPanel(RunControl):
    """Controls, Run/Stop, progress and status, the live dashboard, the monitor, the run history."""

    def __init__(self, cfg: RunConfig | None = None):
        super().__init__()
        self.controls = Controls(cfg or RunConfig.default())
        self.budget_s = 0.0  # the shown run's run.time_budget_s
        self.progress = widgets.IntProgress(
            value=0, min=0, max=1, description="progress", layout=widgets.Layout(width="360px")
        )
        # The lesson kept for this model and conditions, never measured here: a measurement beside
        # a run would disturb the run's own figures, and it is the same lesson every page reads.
        self.lesson = precision_lesson(self.controls.config(), measure=False)
        self.recommendation = widgets.HTML(recommendation_html(self.lesson))
        self.dashboard.on_update(self._on_update)
        self.monitor_view = MonitorView()
        self.monitor = SystemMonitor(self.monitor_view.update)
        self.history = CompareView(picker=False)
        self._init_profile()
        self.widget = widgets.VBox(
            [
                self.controls.widget,
                self.recommendation,
                widgets.HBox([self.run_button, self.stop_button, self.progress, self.profile_button]),
                self.status,
                self.profile_box,
                self.dashboard.widget,
                self.monitor_view.widget,
                widgets.HTML("<b>Runs from this panel</b>"),
                self.history.widget,
            ],
            layout=widgets.Layout(border="1px solid #ddd", padding="6px"),
        )

    def config(self) -> RunConfig:
        return self.controls.config()

    def apply(self, **settings) -> None:
        """precision, device, model, batch_size, steps, budget_s, lr, tf32, channels_last, compile."""
        self.controls.set(**settings)

    def started(self, cfg: RunConfig, handle: RunHandle) -> None:
        self.budget_s = cfg.run.time_budget_s  # a budgeted run's progress is its seconds of steps
        self.progress.max, self.progress.value = (100 if self.budget_s else cfg.run.steps), 0
        self.progress.bar_style = ""
        proc = getattr(handle, "proc", None)  # a submitted job's ranks run where SLURM put them
        self.monitor.start(pids=[proc.pid] if proc else [])

    def ended(self, series: RunSeries, summary: dict) -> None:
        self.monitor.stop()
        self.history.add(self.handle.run_dir)
        self.progress.bar_style = "success" if summary.get("status") == "completed" else "danger"
        if summary.get("status") == "completed":
            self.progress.value = self.progress.max  # a budget or the steps ended it

    def _on_update(self, s: RunSeries) -> None:
        if self.budget_s:  # per cent of the budget: seconds of steps, per rank
            done = 100 * s.step_ms / 1e3 / max(s.world_size, 1) / self.budget_s
        else:
            done = s.last_step
        self.progress.value = min(int(done), self.progress.max)

    # --- "profile this config": the profiling lab under the controls, made on first use ---------
    def _init_profile(self) -> None:
        self.profile_lab = None
        self.profile_box = widgets.VBox([])
        self.profile_button = button(
            "profile this config", tooltip="where this config's step time and memory go"
        )
        self.profile_button.on_click(lambda _: self.profile())

    def profile(self, wait: bool = False):
        """The "profile this config" button: profile the controls' config in a worker."""
        from .profile_view import ProfileLab

        try:
            cfg = self.config()
        except ConfigError as e:
            self.set_status(f"cannot profile: {e}", error=True)
            return None
        if self.profile_lab is None:
            self.profile_lab = ProfileLab(cfg)
            self.profile_box.children = (self.profile_lab.widget,)
        self.profile_lab.start(cfg)
        return self.profile_lab.wait() if wait else self.profile_lab

    def close(self) -> None:
        """Stop the run, the tailer and the monitor, and close the widgets."""
        self.stop()
        self.dashboard.stop()
        self.monitor.stop()
        _close_tree(self.widget)


def _close_tree(widget) -> None:
    """Close a widget and everything inside it (closing a box leaves its children open)."""
    for child in getattr(widget, "children", ()):
        _close_tree(child)
    widget.close()


def recommendation_html(lesson) -> str:
    """The panel's line: the precision lesson kept for its model, or how to measure one."""
    if lesson is None:
        return (
            "<span class='wb-recommendation'>No precision lesson for this model under these "
            "conditions yet: <code>precision_lesson(cfg)</code> (notebook 01's first cell) measures "
            "bf16 and fp16 against fp32 on its own training steps.</span>"
        )
    said = html.escape(lesson.text).replace("\n", "<br>")
    return (
        f"<span class='wb-recommendation'>Precision to try first for this model: "
        f"<b>{html.escape(lesson.answer)}</b><br>{said}</span>"
    )
