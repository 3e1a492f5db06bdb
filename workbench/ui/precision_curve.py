"""The size curve of this device (how much faster a 16-bit matmul runs than fp32's, by the side of
square matrices) with a model's own matrix products marked on it: why a precision pays for one
model and not another on the same machine.

    size_curve_figure(size_curve(device))        # notebook 04: the machine's curve
    size_curve_figure(lesson.curve, lesson)      # notebook 01: the default model's matmuls on it
"""

from __future__ import annotations

import plotly.graph_objects as go

from ..hardware.size_curve import SizeCurve
from .charts import log_log
from .figure import LiveFigure

_COLORS = {"bf16": "#2ca02c", "fp16": "#ff7f0e"}


def size_curve_figure(curve: SizeCurve, lesson=None) -> go.FigureWidget:
    """Each 16-bit type's speed over fp32's against the matrix side, with its 95 % intervals, the
    line of equal speed, and (given a lesson) each of its model's matmuls at its side."""
    fig = LiveFigure()
    with fig.batch_update():
        for dtype in curve.points:
            xs = curve.sides(dtype)
            rs = [curve.ratio(dtype, s) for s in xs]
            fig.add_scatter(
                x=xs,
                y=[r.ratio for r in rs],
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [(r.high - r.ratio) if r.high is not None else 0 for r in rs],
                    "arrayminus": [(r.ratio - r.low) if r.low is not None else 0 for r in rs],
                },
                mode="lines+markers",
                name=f"{dtype} matmul over fp32",
                line={"color": _COLORS.get(dtype)},
                hovertext=[r.label() for r in rs],
            )
        if curve.points:
            every = sorted({s for d in curve.points for s in curve.sides(d)})
            fig.add_scatter(
                x=[every[0], every[-1]],
                y=[1, 1],
                mode="lines",
                name="as fast as fp32",
                line={"color": "grey", "dash": "dot"},
            )
        if lesson is not None and lesson.matmuls:
            for dtype in curve.points:
                fig.add_scatter(
                    x=[m["side"] for m in lesson.matmuls],
                    y=[curve.at(dtype, m["side"]) for m in lesson.matmuls],
                    mode="markers",
                    marker={"symbol": "x", "size": 11, "color": _COLORS.get(dtype)},
                    name=f"{lesson.model}'s matmuls ({dtype})",
                    hovertext=[f"{m['m']}x{m['k']} @ {m['k']}x{m['n']} ({m['op']})" for m in lesson.matmuls],
                )
        log_log(
            fig,
            f"16-bit matmul speed over fp32 by matrix side ({curve.source})",
            "side of a square matmul (a model's: of its FLOPs)",
            "speed over fp32 (x)",
            420,
        )
    return fig
