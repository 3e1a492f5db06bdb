"""The monitor's face: one line of device-level figures and a utilization chart of the last
two minutes. Fed by SystemMonitor samples (about 1 Hz, so no throttle is needed).

    view = MonitorView(); SystemMonitor(view.update).start(); display(view.widget)
"""

from __future__ import annotations

import html
from collections import deque

import ipywidgets as widgets

from .charts import make_figure, publish

WINDOW = 120  # samples kept: two minutes at 1 Hz


class MonitorView:
    def __init__(self):
        self.line = widgets.HTML("<span class='wb-monitor'>system monitor: starts with a run</span>")
        self.figure = make_figure("Utilization (device level)", "%", xlabel="seconds", height=220)
        self.figure.update_layout(width=430, yaxis_range=[0, 105])
        publish(self.figure)
        self.widget = widgets.VBox([self.line, self.figure])
        self._t0: float | None = None
        self._x: deque = deque(maxlen=WINDOW)
        self._cpu: deque = deque(maxlen=WINDOW)
        self._gpu: dict[int, deque] = {}

    def update(self, s: dict) -> None:
        self.line.value = "<span class='wb-monitor'>" + html.escape(describe(s)) + "</span>"
        if self._t0 is None:
            self._t0 = s["t"]
        self._x.append(round(s["t"] - self._t0, 1))
        self._cpu.append(s["cpu_pct"])
        for g in s["gpus"]:
            self._gpu.setdefault(g["index"], deque(maxlen=WINDOW)).append(g["util_pct"])
        traces = [("CPU", list(self._cpu))] + [(f"GPU {i}", list(v)) for i, v in self._gpu.items()]
        while len(self.figure.data) < len(traces):
            self.figure.add_scatter(x=[], y=[], mode="lines")
        x = list(self._x)
        with self.figure.batch_update():
            for trace, (name, ys) in zip(self.figure.data, traces):
                trace.x, trace.y, trace.name = x[-len(ys) :], ys, name
        publish(self.figure, layout=False)


def describe(s: dict) -> str:
    """The one-line summary: CPU, host memory, the run's RSS, then each GPU (or why none)."""
    parts = [
        f"CPU {s['cpu_pct']:.0f}%",
        f"host memory {s['host_used_gib']:.1f}/{s['host_total_gib']:.1f} GiB",
    ]
    if s.get("run_rss_gib") is not None:
        parts.append(f"run RSS {s['run_rss_gib']:.2f} GiB")
    for g in s["gpus"]:
        procs = f", {g['processes']} processes" if g.get("processes") is not None else ""
        parts.append(
            f"GPU {g['index']}: {g['util_pct']:.0f}% busy, "
            f"{g['mem_used_gib']:.1f}/{g['mem_total_gib']:.1f} GiB used (all processes{procs})"
        )
    if not s["gpus"]:
        parts.append(s.get("gpu_note") or "no GPU")
    return " · ".join(parts)
