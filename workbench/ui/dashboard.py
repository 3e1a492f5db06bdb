"""LiveDashboard: tails a run folder on a thread and keeps the live charts and readouts current,
redrawing at most `max_redraws_per_s` times a second whatever the step rate.

    dash = LiveDashboard(run_dir, world_size=2); display(dash.widget); dash.start() ... dash.stop()
"""

from __future__ import annotations

import html
import threading
import time
from pathlib import Path
from typing import Callable

import ipywidgets as widgets

from ..events import GRAD_SCALE, NONFINITE_LOSSES, SAMPLES_PER_S, SKIPPED_STEPS, RunTail
from ..machine.contention import busy_sentence
from .charts import LiveCharts
from .series import RunSeries
from .throttle import Throttle
from .sizing import button

STATUS_COLORS = {"completed": "#2ca02c", "diverged": "#d62728", "stopped": "#d62728", "failed": "#d62728"}


class LiveDashboard:
    """Charts and readouts of one run. Reusable: `watch(run_dir)` switches to another run."""

    def __init__(
        self,
        run_dir: str | Path | None = None,
        world_size: int = 1,
        total_steps: int | None = None,
        max_redraws_per_s: float = 4.0,
        poll_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        alive: Callable[[], bool] | None = None,
        on_stop: Callable[[], None] | None = None,
    ):
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.poll_s, self.max_redraws_per_s, self.clock = poll_s, max_redraws_per_s, clock
        self.charts = LiveCharts(clock)
        self.header = widgets.HTML()
        self.readout = widgets.HTML()
        self.stop_button = None  # a Stop for a run this dashboard can end (a SLURM job)
        shown = [self.header, self.readout, self.charts.widget]
        if on_stop is not None:
            self.stop_button = button("Stop", button_style="warning")
            self.stop_button.on_click(lambda _: self._stop_pressed(on_stop))
            shown.insert(0, self.stop_button)
        self.widget = widgets.VBox(shown)
        self._listeners: list[Callable[[RunSeries], None]] = []
        self._finish_listeners: list[Callable[[RunSeries], None]] = []
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._alive = alive  # whether the run's processes still live: a killed run is not waited on
        self._reset(world_size, total_steps)
        self.redraw()

    def _stop_pressed(self, on_stop: Callable[[], None]) -> None:
        self.stop_button.disabled = True  # one stop is enough; the run's end shows in the charts
        on_stop()

    # --- wiring -----------------------------------------------------------------------------
    def on_update(self, callback: Callable[[RunSeries], None]) -> None:
        """Call `callback(series)` after every redraw (from the dashboard's thread)."""
        self._listeners.append(callback)

    def on_finish(self, callback: Callable[[RunSeries], None]) -> None:
        """Call `callback(series)` once the run has ended and the last redraw is done."""
        self._finish_listeners.append(callback)

    def _reset(self, world_size: int, total_steps: int | None) -> None:
        self.series = RunSeries(world_size, total_steps)
        self.throttle = Throttle(self.max_redraws_per_s, self.clock)
        self._drawn_version = -1

    # --- feeding and drawing ----------------------------------------------------------------
    def feed(self, records: list[dict]) -> None:
        with self._lock:
            self.series.feed(records)

    def maybe_redraw(self, now: bool = False) -> bool:
        """Redraw if something changed and the throttle allows it, or `now` (the run ended, or a
        caller wants it drawn), which also publishes the figures at once. True if drawn."""
        with self._lock:
            if self.series.version == self._drawn_version:
                return False
            if not (self.throttle.ready() or now):
                return False
            self.redraw(now=now)
            return True

    @property
    def redraws(self) -> int:
        return self.charts.redraws

    def redraw(self, now: bool = True) -> None:
        """Draw the series now; `now=False` (a live run's throttled redraws) lets the charts
        send their whole-figure copies less often (ui.charts.PUBLISH_EVERY_S)."""
        with self._lock:
            s = self.series
            self._drawn_version = s.version
            self.charts.redraw(s, now=now)
            self.header.value = self._header_html(s)
            self.readout.value = self._readout_html(s)
        for cb in self._listeners:
            cb(s)

    def _header_html(self, s: RunSeries) -> str:
        name = html.escape(self.run_dir.name) if self.run_dir else "no run yet"
        color = STATUS_COLORS.get(s.status, "#555")
        msg = f" — {html.escape(s.message)}" if s.message else ""
        return f"<b>{name}</b> <span class='wb-status' style='color:{color}'><b>{s.status}</b>{msg}</span>"

    @staticmethod
    def _readout_html(s: RunSeries) -> str:
        parts = [f"step {s.last_step}" + (f"/{s.total_steps}" if s.total_steps else "")]
        sps = s.latest(SAMPLES_PER_S)
        if sps is not None:
            parts.append(f"{sps:,.0f} samples/s" + (" total" if s.world_size > 1 else ""))
        share = s.data_wait_share()
        if share is not None:
            parts.append(f"waited for data {share:.0%} of the time")
        if s.mfu_over_peak:
            parts.append(mfu_text(float("inf")))
        elif s.mfu is not None:  # a fraction of the device's peak
            parts.append(mfu_text(s.mfu))
        if s.amp:
            a = s.amp
            parts.append(
                "AMP health: "
                + ", ".join(
                    [
                        f"grad scale {a[GRAD_SCALE]:g}" if GRAD_SCALE in a else "",
                        f"skipped steps {a.get(SKIPPED_STEPS, 0):g}",
                        f"non-finite losses {a.get(NONFINITE_LOSSES, 0):g}",
                    ]
                ).lstrip(", ")
            )
        elif s.ranks and s.status != "waiting":
            parts.append("non-finite losses 0")
        busy = busy_sentence(s.contention)
        if busy:
            parts.append(f"<b style='color:#d62728'>machine busy: {html.escape(busy)}</b>")
        return "<span class='wb-readout'>" + " · ".join(parts) + "</span>"

    # --- the tailer thread ------------------------------------------------------------------
    def start(self) -> "LiveDashboard":
        """Tail `run_dir` on a thread until the run ends or `stop()`."""
        if self.run_dir is None:
            raise ValueError("LiveDashboard.start() needs a run_dir; use watch(run_dir)")
        if self._thread is not None and self._thread.is_alive():
            return self
        if self._thread is not None:  # tailing again from the start: do not count records twice
            with self._lock:
                self._reset(self.series.world_size, self.series.total_steps)
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"dashboard:{self.run_dir.name}")
        self._thread.start()
        return self

    def watch(
        self,
        run_dir: str | Path,
        world_size: int = 1,
        total_steps: int | None = None,
        alive: Callable[[], bool] | None = None,
    ) -> "LiveDashboard":
        """Switch to another run folder (clearing the charts) and start tailing it. `alive`
        tells whether its process still runs, so a hard-killed run is reported, not waited on."""
        self.stop()
        with self._lock:
            self.run_dir = Path(run_dir)
            self._alive = alive
            self._reset(world_size, total_steps)
            self.redraw()
        return self.start()

    def _loop(self) -> None:
        tail = RunTail(self.run_dir)
        series = self.series
        while True:
            stopping = self._stop.is_set()
            batch = tail.poll()
            if batch:
                self.feed(batch)
            if not series.finished and self._alive is not None and not self._alive():
                self.feed(tail.poll())  # the last lines, written just before it exited
                series.mark_exited(None)
            if series.finished or stopping:
                break
            self.maybe_redraw()
            self._stop.wait(self.poll_s)
        self.maybe_redraw(now=True)
        if series.finished:
            for cb in self._finish_listeners:
                cb(series)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop tailing (the run itself goes on); the charts keep what they show."""
        self._stop.set()
        t = self._thread
        if t is not None and t.is_alive() and threading.current_thread() is not t:
            t.join(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the tailer has seen the end of the run. True if it has."""
        t = self._thread
        if t is not None and threading.current_thread() is not t:
            t.join(timeout)
        return self.series.finished

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


def mfu_text(mfu: float) -> str:
    """MFU with three significant digits (a small model's 0.004% is not 0.0%); above 100 % it is
    not a result: the peak it was divided by is wrong."""
    if mfu > 1:
        return (
            "MFU above 100 %: the peak it is measured against is wrong (measured under load?); "
            "measure it again with `workbench hw --bench`"
        )
    return f"MFU {float(f'{mfu * 100:.3g}'):g}%"
