"""RunControl: the Run / Stop / wait lifecycle every run panel shares. One run at a time (Run while
one goes says so), Stop ends every rank within seconds (events kept), the live dashboard tails the
run, and when it ends the status line shows the supervisor's diagnosis from summary.json (the rank
at fault and its own error, not another rank's knock-on error), with that rank's traceback.

Panels start runs with the kernel's Launcher (workbench.distributed.launch.launcher()), which keeps
a spare, pre-imported worker ready from when a panel is shown (workbench.distributed.warm), so that
Run reaches its first step in about a second; `run.warm_worker = false` starts cold.

Subclasses say what to run (`config`), how settings map to widgets (`apply`), and what else to do
when a run starts or ends (`started`, `ended`).
"""

from __future__ import annotations

import html
import threading

import ipywidgets as widgets

from ..config import ConfigError, RunConfig
from ..distributed.launch import RunHandle, launcher
from .dashboard import LiveDashboard
from .series import RunSeries
from .sizing import button

ERROR_COLOR = "#d62728"


class RunControl:
    def __init__(self):
        self.run_button = button(
            "Run", button_style="success", icon="play", tooltip="start a run with these settings"
        )
        self.stop_button = button(
            "Stop",
            button_style="danger",
            icon="stop",
            disabled=True,
            tooltip="stop every rank (its events are kept)",
        )
        self.status = widgets.HTML("<span class='wb-panel-status'>ready</span>")
        self.dashboard = LiveDashboard()
        self.dashboard.on_finish(self._on_finish)
        self.launcher = launcher()  # the kernel's: its spares serve every panel
        self.handle: RunHandle | None = None
        self.result: dict | None = None  # the summary of the last run that ended
        self.run_dirs: list = []
        self._finished = threading.Event()
        self._finished.set()
        self.run_button.on_click(lambda _: self._start())
        self.stop_button.on_click(lambda _: self.stop())

    # --- what subclasses say ----------------------------------------------------------------
    def config(self) -> RunConfig:
        raise NotImplementedError

    def apply(self, **settings) -> None:
        """Set widgets from keyword settings, as a person would."""
        raise NotImplementedError

    def started(self, cfg: RunConfig, handle: RunHandle) -> None:
        """Called once a run has started."""

    def ended(self, series: RunSeries, summary: dict) -> None:
        """Called once a run has ended and its end is drawn."""

    # --- the lifecycle ----------------------------------------------------------------------
    def run(self, wait: bool = False, timeout: float | None = None, **settings) -> RunHandle | None:
        """Set widgets and press Run. With wait=True, return once the run has ended and the
        charts and status show its end."""
        if settings:
            self.apply(**settings)
        self._start()
        if wait and self.handle is not None:
            self.wait(timeout)
        return self.handle

    def submit(
        self,
        access=None,
        wait: bool = False,
        timeout: float | None = None,
        nodes: int | None = None,
        **settings,
    ):
        """Set widgets and submit the run as a SLURM job, to `access` (a
        workbench.distributed.clusters.Access) or the cluster find_cluster() finds from here, on
        `nodes` nodes (default: the config's distributed.nnodes): the same live charts from its run
        folder, Stop cancels it with scancel, and its end shows SLURM's state with the rank's
        cause. Returns the Job."""
        if settings:
            self.apply(**settings)
        self._start(lambda cfg: _submit(cfg, access, nodes))
        if wait and self.handle is not None:
            self.wait(timeout)
        return self.handle

    def _start(self, start=None) -> None:
        """Start the config's run with the launcher, or with `start(cfg)` (a submitted job)."""
        if not self._finished.is_set():
            self.set_status("a run is going: stop it first", error=True)
            return
        try:
            cfg = self.config()
            if start is None:
                self.launcher.keep_warm()  # the next run after this one starts warm
                handle = self.launcher.start(self.launcher.plan(cfg))
            else:
                handle = start(cfg)
                cfg = handle.folder.config()  # as submitted: its nodes, hence its ranks
        except ConfigError as e:
            self.set_status(f"cannot run: {e}", error=True)
            return
        self.handle, self.result = handle, None
        self._finished.clear()
        self.run_button.disabled, self.stop_button.disabled = True, False
        notes = "".join(f"; note: {n}" for n in handle.notes)  # what the pre-launch check overrode
        t = handle.threads
        threads = f", {t.threads} thread(s) each, {t.wait_policy} wait" if t else ""
        where = f" as SLURM job {handle.job_id}" if start is not None else ""
        self.set_status(
            f"running {handle.run_dir.name}{where} on {cfg.distributed.world_size} rank(s){threads}{notes}"
        )
        self.started(cfg, handle)
        self.dashboard.watch(
            handle.run_dir, cfg.distributed.world_size, cfg.run.planned_steps(), alive=handle.running
        )

    def stop(self) -> None:
        """Stop the current run (SIGTERM, then SIGKILL after a grace period); events are kept."""
        if self.handle is not None and self.handle.running():
            self.set_status("stopping every rank ...")
            self.stop_button.disabled = True
            self.handle.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the current run has ended and its end is drawn. True if it has."""
        return self._finished.wait(timeout)

    def _on_finish(self, series: RunSeries) -> None:
        """From the dashboard's thread: reap the run, read the supervisor's diagnosis, show it."""
        try:
            self.handle.wait(30)  # the supervisor writes summary.json before it exits
        except Exception:  # noqa: BLE001 - still shown as whatever the summary says
            pass
        self.result = self.handle.summary()
        self.run_dirs.append(self.handle.run_dir)
        status = self.result.get("status", series.status)
        message = self.result.get("message") or series.message
        self.set_status(
            f"{status}: {message}" if message else status,
            error=status != "completed",
            details=self.result.get("traceback"),
        )
        self.ended(series, self.result)
        self.run_button.disabled, self.stop_button.disabled = False, True
        self._finished.set()

    def set_status(self, text: str, error: bool = False, details: str | None = None) -> None:
        color = ERROR_COLOR if error else "#333"
        extra = (
            (
                f"<details><summary>traceback of the failing rank</summary><pre>"
                f"{html.escape(details[-3000:])}</pre></details>"
            )
            if details
            else ""
        )
        self.status.value = (
            f"<span class='wb-panel-status' style='color:{color}'>{html.escape(text)}</span>{extra}"
        )

    def _repr_mimebundle_(self, **kwargs):
        try:  # shown: a person is about to press Run, so have a spare ready for it
            self.launcher.keep_warm(self.config())
        except ConfigError:
            pass
        return self.widget._repr_mimebundle_(**kwargs)


def _submit(cfg: RunConfig, access=None, nodes: int | None = None):
    from ..distributed.jobs import submit
    from ..distributed.clusters import find_cluster
    from ..net import free_port

    if access is None:
        access, why = find_cluster()
        if access is None:
            raise ConfigError(why)
    return submit(cfg, nodes=nodes, prefix=access.prefix, env=access.env, port=free_port())
