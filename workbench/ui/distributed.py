"""DistributedPanel: start a multi-rank run from a notebook, see the exact torchrun command, watch
every rank live, stop it; when it ends, the launcher's verdict names the failing rank.

    panel = DistributedPanel(RunConfig.default()); panel      # in a notebook cell
    panel.run(nproc=2, steps=100, wait=True)                  # the Run button, from code
"""
from __future__ import annotations

import html
import os
import shlex
import threading

import ipywidgets as widgets

from ..config import ConfigError, RunConfig
from ..launch import RunHandle, start_run
from .dashboard import LiveDashboard
from .series import RunSeries


class DistributedPanel:
    """Ranks, backend and steps; Run and Stop; the command; the live per-rank dashboard."""

    def __init__(self, cfg: RunConfig | None = None):
        self.base = cfg or RunConfig.default()
        d = self.base.distributed
        self.nproc = widgets.IntSlider(value=max(d.nproc, 2), min=1, max=max(4, os.cpu_count() or 1),
                                       description="ranks")
        self.backend = widgets.Dropdown(options=["auto", "gloo", "nccl"], value=d.backend,
                                        description="backend")
        self.steps = widgets.IntText(value=self.base.run.steps, description="steps",
                                     layout=widgets.Layout(width="200px"))
        self.run_button = widgets.Button(description="Run", button_style="success", icon="play")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop",
                                          disabled=True, tooltip="stops every rank within seconds")
        self.status = widgets.HTML("ready")
        self.command = widgets.HTML()
        self.dashboard = LiveDashboard()
        self.dashboard.on_finish(self._on_finish)
        self.handle: RunHandle | None = None
        self.result: dict | None = None
        self._finished = threading.Event()
        self._finished.set()
        self.run_button.on_click(lambda _: self._start())
        self.stop_button.on_click(lambda _: self.stop())
        self.widget = widgets.VBox([
            widgets.HBox([self.nproc, self.backend, self.steps]),
            widgets.HBox([self.run_button, self.stop_button]), self.status, self.command,
            self.dashboard.widget])

    def config(self) -> RunConfig:
        return self.base.replace(**{"distributed.nproc": self.nproc.value,
                                    "distributed.backend": self.backend.value,
                                    "run.steps": self.steps.value})

    def run(self, wait: bool = False, timeout: float | None = None, **settings) -> RunHandle | None:
        """Set nproc / backend / steps and press Run; with wait=True return once it has ended."""
        for name, value in settings.items():
            getattr(self, name).value = value
        self._start()
        if wait and self.handle is not None:
            self.wait(timeout)
        return self.handle

    def _start(self) -> None:
        if not self._finished.is_set():
            return self._set_status("a run is going: stop it first", error=True)
        try:
            cfg = self.config()
            self.handle = start_run(cfg)
        except ConfigError as e:
            return self._set_status(f"cannot run: {e}", error=True)
        self._finished.clear()
        self.result = None
        self.run_button.disabled, self.stop_button.disabled = True, False
        self.command.value = ("<details open><summary>the exact command</summary><pre style="
                              f"'white-space:pre-wrap'>{html.escape(shlex.join(self.handle.command))}"
                              "</pre></details>")
        self._set_status(f"running {self.handle.run_dir.name} on {cfg.distributed.world_size} rank(s)")
        self.dashboard.watch(self.handle.run_dir, cfg.distributed.world_size, cfg.run.steps,
                             alive=self.handle.running)

    def stop(self) -> None:
        if self.handle is not None and self.handle.running():
            self._set_status("stopping every rank ...")
            self.handle.stop()

    def wait(self, timeout: float | None = None) -> bool:
        return self._finished.wait(timeout)

    def _on_finish(self, series: RunSeries) -> None:
        """The supervisor's summary, not the first rank's error: it names the rank at fault."""
        try:
            self.handle.wait(30)
        except Exception:  # noqa: BLE001 - still shown as whatever the summary says
            pass
        self.result = self.handle.summary()
        status, message = self.result.get("status", series.status), self.result.get("message", "")
        text = f"{status}: {message}" if message else f"{status}: {series.message}"
        tb = self.result.get("traceback")
        self._set_status(text, error=status != "completed", details=tb)
        self.run_button.disabled, self.stop_button.disabled = False, True
        self._finished.set()

    def _set_status(self, text: str, error: bool = False, details: str | None = None) -> None:
        color = "#d62728" if error else "#333"
        extra = (f"<details><summary>traceback of the failing rank</summary><pre>"
                 f"{html.escape(details[-3000:])}</pre></details>") if details else ""
        self.status.value = f"<span style='color:{color}'>{html.escape(text)}</span>{extra}"

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)
