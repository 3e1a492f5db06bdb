"""The live charts: plotly FigureWidgets for loss, samples/s, step time and memory, one trace per
rank (plus the total samples/s over ranks), redrawn from a RunSeries inside `batch_update()`.

    charts = LiveCharts(); charts.redraw(series); display(charts.widget)
"""
from __future__ import annotations

from copy import deepcopy

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go

from .series import RunSeries

MAX_POINTS = 1500  # per trace: longer runs are thinned for drawing, never for the figures
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
CHARTS = {  # name: (title, y-axis label)
    "loss": ("Loss", "loss"),
    "samples_per_s": ("Throughput", "samples/s"),
    "step_time_ms": ("Step time", "ms"),
    "memory": ("Memory", "GiB"),
}


def thin(xs: list, ys: list, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Every k-th point and always the last, so a long run stays cheap to send and draw.

    Float arrays, not lists: plotly validates and compares a list element by element (about
    10x slower), and sends an array as one binary buffer. A missing value (None) becomes NaN."""
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if len(x) <= max_points:
        return x, y
    k = -(-len(x) // max_points)
    idx = np.arange(0, len(x), k)
    if idx[-1] != len(x) - 1:
        idx = np.append(idx, len(x) - 1)
    return x[idx], y[idx]


def publish(fig: go.FigureWidget, layout: bool = True) -> None:
    """Store the figure's current data and layout in the widget state a new view starts from.

    plotly refreshes that state only in the FigureWidget's own repr, which displaying it inside a
    container (VBox, HBox) skips: the view would start from the figure as first built, and a
    reloaded page would show empty charts. Views already shown follow the update messages."""
    if layout:  # the layout holds the whole template: copy it only when it changed
        fig._widget_layout = deepcopy(fig._layout_obj._props)
    fig._widget_data = deepcopy(fig._data)


def make_figure(title: str, ylabel: str, xlabel: str = "step", height: int = 250) -> go.FigureWidget:
    fig = go.FigureWidget()
    fig.update_layout(title={"text": title, "x": 0.02, "font": {"size": 14}}, height=height,
                      width=430, margin={"l": 55, "r": 10, "t": 36, "b": 36},
                      template="plotly_white", showlegend=True,
                      legend={"orientation": "h", "y": -0.25, "font": {"size": 10}},
                      xaxis_title=xlabel, yaxis_title=ylabel, uirevision="keep")
    publish(fig)
    return fig


class LiveCharts:
    """Four figures in a 2x2 grid. `redraw(series)` updates every trace in one batch per figure."""

    def __init__(self):
        self.figures = {name: make_figure(*CHARTS[name]) for name in CHARTS}
        f = self.figures
        self.widget = widgets.VBox([widgets.HBox([f["loss"], f["samples_per_s"]]),
                                    widgets.HBox([f["step_time_ms"], f["memory"]])])
        self.redraws = 0
        self._styles: dict[str, list] = {}

    def traces_for(self, series: RunSeries) -> dict[str, list[tuple[str, list, list, dict]]]:
        """name -> [(trace name, x, y, line style)]: what each figure should show right now."""
        out: dict[str, list] = {name: [] for name in CHARTS}
        for rank in sorted(series.ranks):
            r = series.ranks[rank]
            color = {"color": COLORS[rank % len(COLORS)], "width": 1.5}
            for key in ("loss", "samples_per_s", "step_time_ms"):
                out[key].append((f"rank {rank}", r["step"], r[key], color))
            if any(v is not None for v in r["mem_reserved_gib"]):
                out["memory"].append((f"rank {rank} device", r["mem_step"], r["mem_reserved_gib"], color))
                out["memory"].append((f"rank {rank} RSS", r["mem_step"], r["rss_gib"],
                                      dict(color, dash="dot")))
            else:
                out["memory"].append((f"rank {rank} RSS", r["mem_step"], r["rss_gib"], color))
        if series.world_size > 1 or len(series.ranks) > 1:
            out["samples_per_s"].append(("total", series.total["step"],
                                         series.total["samples_per_s"], {"color": "black", "width": 2}))
        return out

    def redraw(self, series: RunSeries) -> None:
        for name, traces in self.traces_for(series).items():
            fig = self.figures[name]
            while len(fig.data) < len(traces):  # a new rank appeared: add its trace first
                fig.add_scatter(x=[], y=[], mode="lines")
            styles = [(label, line) for label, _, _, line in traces]
            title = _title(CHARTS[name][0], series)
            with fig.batch_update():
                for trace, (label, xs, ys, line) in zip(fig.data, traces):
                    trace.x, trace.y = thin(xs, ys)
                if styles != self._styles.get(name):  # names and colours rarely change: set
                    for trace, (label, line) in zip(fig.data, styles):  # them only then (each
                        trace.name, trace.line = label, line  # assignment is validated: slow)
                    self._styles[name] = styles
                for trace in fig.data[len(traces):]:  # after a reset: empty, not removed
                    if len(trace.x):
                        trace.x, trace.y = [], []
                retitle = fig.layout.title.text != title
                if retitle:
                    fig.layout.title.text = title
            publish(fig, layout=retitle)
        self.redraws += 1


def _title(base: str, series: RunSeries) -> str:
    if series.status in ("stopped", "failed"):
        return f"{base} · {series.status} at step {series.last_step}"
    return base
