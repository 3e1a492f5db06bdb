"""The live charts: plotly FigureWidgets for loss, samples/s, step time and memory, one trace per
rank (plus the total samples/s over ranks), redrawn from a RunSeries inside `batch_update()`.

    charts = LiveCharts(); charts.redraw(series); display(charts.widget)

Throughput is drawn as faint raw points under a rolling median (raw per-step samples/s reads as
noise); memory axes start at zero, so a flat RSS looks flat; a non-finite loss is marked.
"""

from __future__ import annotations

import time
from copy import deepcopy

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go

from ..events import LOSS, MEM_RESERVED_GIB, RSS_GIB, SAMPLES_PER_S, STEP_TIME_MS
from .curve import MAX_BUCKETS
from .figure import LiveFigure
from .series import SMOOTH_STEPS, RunSeries
from .throttle import Throttle

MAX_POINTS = 3 * MAX_BUCKETS  # per trace whatever the run's length: low, high, a gap (ui.curve)
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
CHARTS = {  # name: (title, y-axis label)
    LOSS: ("Loss", "loss"),
    SAMPLES_PER_S: ("Throughput", "samples/s"),
    STEP_TIME_MS: ("Step time", "ms"),
    "memory": ("Memory", "GiB"),
}
# The whole-figure copy a new view starts from: sent after a change of names, styles or title, at
# the end, and otherwise at most this often. Every redraw's update message already carries each
# trace's whole x and y, so a view that starts from an older copy is current after the next one;
# sending the copy with every redraw doubled what a page had to take in.
PUBLISH_EVERY_S = 5.0
RAW = {"mode": "markers", "opacity": 0.25, "marker": {"size": 3}}
LINE = {"mode": "lines", "opacity": 1.0}


def thin(xs, ys, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Every k-th point and always the last, for curves read from disk (the compare view).

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


def wrapped(text: str, width_px: int | None, font_px: int = 14) -> str:
    """A chart title broken into lines that fit the chart's width (plotly clips a long title
    instead of wrapping it)."""
    per_line = max(20, int(((width_px or 560) - 60) / (0.6 * font_px)))  # no width: a cell's share
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > per_line:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "<br>".join(lines + ([line] if line else []))


def set_title(fig: go.FigureWidget, text: str, font_px: int = 14) -> None:
    """Title a figure in lines that fit it, with the room above the plot they need."""
    text = wrapped(text, fig.layout.width, font_px)
    fig.layout.title.text = text
    fig.layout.margin.t = 24 + int(1.4 * font_px) * (text.count("<br>") + 1)


# A legend under the chart: its top anchored below the x-axis title (the axis title drawn close to
# its ticks), so more entries grow it downward and never over the title
LEGEND_BELOW = {"orientation": "h", "y": -0.35, "yanchor": "top", "font": {"size": 10}}
AXIS_TITLE_STANDOFF = 4


def make_figure(title: str, ylabel: str, xlabel: str = "step", height: int = 250) -> go.FigureWidget:
    fig = LiveFigure()
    fig.update_layout(
        title={"text": title, "x": 0.02, "font": {"size": 14}},
        height=height,
        width=430,
        margin={"l": 55, "r": 10, "t": 36, "b": 36},
        template="plotly_white",
        showlegend=True,
        legend=LEGEND_BELOW,
        xaxis_title=xlabel,
        xaxis_title_standoff=AXIS_TITLE_STANDOFF,
        yaxis_title=ylabel,
        uirevision="keep",
    )
    publish(fig)
    return fig


class LiveCharts:
    """Four figures in a 2x2 grid. `redraw(series)` updates every trace in one batch per figure."""

    def __init__(self, clock=time.monotonic):
        self.figures = {name: make_figure(*CHARTS[name]) for name in CHARTS}
        self._copy_due = {name: Throttle(1 / PUBLISH_EVERY_S, clock) for name in CHARTS}
        f = self.figures
        self.widget = widgets.VBox(
            [widgets.HBox([f[LOSS], f[SAMPLES_PER_S]]), widgets.HBox([f[STEP_TIME_MS], f["memory"]])]
        )
        self.redraws = 0
        self.points_sent = 0  # the work of every redraw: bounded per trace, not by the run's length
        self._styles: dict[str, list] = {}
        self.figures["memory"].update_layout(yaxis={"rangemode": "tozero"})  # flat looks flat
        publish(self.figures["memory"])

    def traces_for(self, series: RunSeries) -> dict[str, list[tuple]]:
        """name -> [(trace name, x, y, style)]: what each figure should show right now."""
        out: dict[str, list] = {name: [] for name in CHARTS}
        for rank in sorted(series.ranks):
            r = series.ranks[rank]
            line = {"color": COLORS[rank % len(COLORS)], "width": 1.5}
            out[LOSS].append((f"rank {rank}", *r[LOSS].xy(), {**LINE, "line": line}))
            if r[LOSS].nonfinite:  # where the loss was NaN or inf: marked, never thinned away
                x = np.asarray(r[LOSS].nonfinite, dtype=float)
                _, ys = r[LOSS].xy()
                y = np.full(len(x), np.nanmin(ys) if np.isfinite(ys).any() else 0.0)
                out[LOSS].append(
                    (
                        f"rank {rank} non-finite",
                        x,
                        y,
                        {
                            "mode": "markers",
                            "opacity": 1.0,
                            "marker": {"symbol": "x", "color": "#d62728", "size": 9},
                        },
                    )
                )
            out[SAMPLES_PER_S].append(
                (
                    f"rank {rank}",
                    *r[SAMPLES_PER_S].xy(),
                    {**RAW, "marker": {**RAW["marker"], "color": line["color"]}},
                )
            )
            out[SAMPLES_PER_S].append(
                (
                    f"rank {rank} (median of {SMOOTH_STEPS})",
                    *r["samples_per_s_median"].xy(),
                    {**LINE, "line": line},
                )
            )
            out[STEP_TIME_MS].append((f"rank {rank}", *r[STEP_TIME_MS].xy(), {**LINE, "line": line}))
            if len(r[MEM_RESERVED_GIB]):
                out["memory"].append(
                    (f"rank {rank} device", *r[MEM_RESERVED_GIB].xy(), {**LINE, "line": line})
                )
                out["memory"].append(
                    (f"rank {rank} RSS", *r[RSS_GIB].xy(), {**LINE, "line": dict(line, dash="dot")})
                )
            else:
                out["memory"].append((f"rank {rank} RSS", *r[RSS_GIB].xy(), {**LINE, "line": line}))
        if series.world_size > 1 or len(series.ranks) > 1:
            black = {"color": "black", "width": 2}
            out[SAMPLES_PER_S].append(
                (
                    "total",
                    *series.total[SAMPLES_PER_S].xy(),
                    {**RAW, "marker": {**RAW["marker"], "color": "black"}},
                )
            )
            out[SAMPLES_PER_S].append(
                (
                    f"total (median of {SMOOTH_STEPS})",
                    *series.total["samples_per_s_median"].xy(),
                    {**LINE, "line": black},
                )
            )
        return out

    def redraw(self, series: RunSeries, now: bool = True) -> None:
        """Update every figure; `now=False` (a live run's throttled redraws) sends the
        whole-figure copy only when names, styles or title changed or PUBLISH_EVERY_S passed."""
        for name, traces in self.traces_for(series).items():
            fig = self.figures[name]
            while len(fig.data) < len(traces):  # a new rank appeared: add its trace first
                fig.add_scatter(x=[], y=[], mode="lines")
            styles = [(label, style) for label, _, _, style in traces]
            title = _title(CHARTS[name][0], series)
            with fig.batch_update():
                for trace, (label, xs, ys, style) in zip(fig.data, traces):
                    trace.x, trace.y = xs, ys  # already thinned: at most MAX_POINTS each
                    self.points_sent += len(xs)
                restyle = styles != self._styles.get(name)
                if restyle:  # names and styles rarely change: set
                    for trace, (label, style) in zip(fig.data, styles):  # them only then (each
                        trace.name = label  # assignment is validated: slow)
                        trace.update(**style)
                    self._styles[name] = styles
                for trace in fig.data[len(traces) :]:  # after a reset: empty, not removed
                    if len(trace.x):
                        trace.x, trace.y = [], []
                retitle = fig.layout.title.text != title
                if retitle:
                    fig.layout.title.text = title
            due = self._copy_due[name].ready()  # asked each redraw: one timed copy per 5 s
            if due or now or restyle or retitle:
                publish(fig, layout=retitle)
        self.redraws += 1


def _title(base: str, series: RunSeries) -> str:
    if series.status in ("stopped", "failed"):
        return f"{base} · {series.status} at step {series.last_step}"
    return base


def log_log(fig: go.FigureWidget, title: str, x: str, y: str, height: int) -> None:
    """A log-log chart's title, axes and legend, as every such chart here draws them."""
    set_title(fig, title)
    fig.update_layout(
        xaxis={"type": "log", "title": x},
        yaxis={"type": "log", "title": y},
        height=height,
        legend={"font": {"size": 10}},
    )
