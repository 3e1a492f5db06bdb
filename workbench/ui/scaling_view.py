"""ScalingView: run the scaling study on a thread and chart measured samples/s against ideal as
each run finishes, with the table and the explanation underneath.

    view = ScalingView(cfg, processes=(1, 2)); view.run(wait=True); view.frame
"""

from __future__ import annotations

import html

import ipywidgets as widgets
import pandas as pd
import plotly.graph_objects as go

from ..config import RunConfig
from ..measure.ratios import speedup_text
from ..events import SAMPLES_PER_S
from ..trials.scaling import explain, study
from .charts import COLORS
from .figure import LiveFigure
from .job import BackgroundJob
from .table import html_table, load_line

COLUMNS = [
    "mode",
    "processes",
    "batch_per_rank",
    "grad_accum_steps",
    "global_batch",
    "threads_per_process",
    "total_threads",
    "rounds",
    SAMPLES_PER_S,
    "ideal_samples_per_s",
    "speedup",
    "speedup_low",
    "speedup_high",
    "efficiency",
    "other_cpu_cores",
    "status",
]


def scaling_figure() -> go.FigureWidget:
    fig = LiveFigure()
    fig.update_layout(
        title={"text": "Samples/s against ideal", "x": 0.02},
        height=320,
        width=560,
        template="plotly_white",
        xaxis_title="processes",
        yaxis_title="samples/s",
        xaxis={"dtick": 1},
        margin={"l": 60, "r": 10, "t": 40, "b": 40},
    )
    return fig


def draw(fig: go.FigureWidget, rows: list[dict]) -> None:
    """Measured (solid) and ideal (dashed) per mode, redrawn in one batch."""
    with fig.batch_update():
        fig.data = []
        for i, mode in enumerate(dict.fromkeys(r["mode"] for r in rows)):
            part = sorted(
                (r for r in rows if r["mode"] == mode and r.get(SAMPLES_PER_S)), key=lambda r: r["processes"]
            )
            xs = [r["processes"] for r in part]
            color = COLORS[i % len(COLORS)]
            fig.add_scatter(
                x=xs,
                y=[r[SAMPLES_PER_S] for r in part],
                name=f"{mode}: measured",
                mode="lines+markers",
                line={"color": color},
            )
            fig.add_scatter(
                x=xs,
                y=[r["ideal_samples_per_s"] for r in part],
                name=f"{mode}: ideal",
                mode="lines",
                line={"color": color, "dash": "dash"},
            )


SHOWN = [
    "mode",
    "processes",
    "global_batch",
    "total_threads",
    "rounds",
    SAMPLES_PER_S,
    "speedup",
    "efficiency",
    "status",
]


def scaling_table(frame: pd.DataFrame) -> str:
    """The study's rows with the speedup's interval in its cell; the load they met said once."""
    rows = []
    for r in frame.to_dict("records"):
        r["speedup"] = speedup_text(r.get("speedup"), r.get("speedup_low"), r.get("speedup_high"))
        rows.append(r)
    return html_table(
        rows, SHOWN, above=load_line(r.get("other_cpu_cores") for r in rows), where="the scaling table"
    )


class ScalingView:
    def __init__(
        self,
        cfg: RunConfig,
        processes=(1, 2),
        modes=("strong", "weak"),
        accumulate: bool = False,
        rounds: int = 1,
    ):
        self.cfg, self.processes, self.modes, self.accumulate = cfg, processes, modes, accumulate
        self.rounds = rounds
        self.figure = scaling_figure()
        self.status = widgets.HTML("not started")
        self.table = widgets.HTML()
        self.widget = widgets.VBox([self.status, self.figure, self.table])
        self.frame: pd.DataFrame | None = None
        self._rows: list[dict] = []
        self.job = BackgroundJob(self.status, name="scaling-study")

    @property
    def error(self) -> BaseException | None:
        return self.job.error

    def run(self, wait: bool = False, timeout: float | None = None) -> "ScalingView":
        """Run the study on a thread (wait=True: until it ends); the chart grows run by run."""
        if self.job.start(self._work) and wait:
            self.job.join(timeout)
        return self

    def wait(self, timeout: float | None = None) -> pd.DataFrame:
        """The study's table once done (its error raised)."""
        return self.job.wait(timeout)

    def _on_update(self, rows: list[dict]) -> None:
        self._rows = rows
        draw(self.figure, rows)
        done = sum(r["rounds"] for r in rows)
        self.status.value = f"{done} run(s) measured"

    def _work(self) -> pd.DataFrame:
        self.status.value = "running ..."
        self._rows = []
        self.frame = study(
            self.cfg,
            self.processes,
            self.modes,
            self.accumulate,
            on_update=self._on_update,
            rounds=self.rounds,
        )
        draw(self.figure, self.frame.to_dict("records"))
        self.table.value = scaling_table(self.frame)
        self.status.value = "<br>".join(html.escape(line) for line in explain(self.frame).split("\n"))
        return self.frame

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)
