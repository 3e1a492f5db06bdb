"""Widgets of the data loading lab: the sweep with a progress bar, a live chart of samples/s per
setting, a heat map of the grid and the recommendation; a chart of how much of each training step
waited for data.

    lab = LoaderLab(ImageFolder(root), grid(num_workers=[0, 1, 2], batch_size=[32, 64]))
    lab            # shows the controls and charts; lab.start() sweeps on a thread, lab.wait()
"""

from __future__ import annotations

import html
import time

import ipywidgets as widgets
import plotly.graph_objects as go

from ..events import DATA_WAIT_MS, EVENT, SAMPLES_PER_S, STEP, STEP_TIME_MS, read_events
from ..machine.contention import busy_sentence
from ..loading.advice import recommend, wait_share_sentence
from ..loading.loader_sweep import MEASURE, run_sweep, summarize_sweep
from ..measure.warmup import warmup_steps
from .figure import LiveFigure
from .job import BackgroundJob
from .sizing import button

REDRAW_EVERY_S = 0.25


def _row_label(setting) -> str:
    """The heat map's row: everything but the batch size (the column)."""
    return " ".join(p for p in setting.label.split() if not p.startswith("b")) or "0w"


class LoaderLab:
    """Runs `run_sweep` on a BackgroundJob and redraws a few times a second; `.table` and `.advice`
    hold the results once it is done, `.error` what stopped it."""

    def __init__(self, dataset, settings, rounds: int = 3, max_batches: int = 20, step=None, nproc: int = 1):
        self.dataset, self.settings, self.step, self.nproc = dataset, settings, step, nproc
        self.rounds, self.max_batches = rounds, max_batches
        self.records: list[dict] = []
        self.table = self.advice = self.contention = None
        self._last_draw = 0.0
        labels = [s.label for s in settings]
        self.progress = widgets.IntProgress(
            value=0, min=0, max=len(settings) * rounds, description="sweep", bar_style="info"
        )
        self.status = widgets.HTML("not started")
        self.bars = LiveFigure(
            data=[
                go.Bar(
                    x=labels,
                    y=[0] * len(labels),
                    error_y=dict(type="data", array=[0] * len(labels)),
                    hovertemplate="%{x}: %{y:.0f} samples/s<extra></extra>",
                )
            ],
            layout=dict(
                title="samples/s per setting (median of rounds so far)",
                height=330,
                yaxis_title="samples/s",
                margin=dict(t=40, b=40, l=60, r=10),
            ),
        )
        rows = list(dict.fromkeys(_row_label(s) for s in settings))  # first-seen order
        cols = sorted({s.batch_size for s in settings})
        self._rows, self._cols = rows, cols
        self.heat = LiveFigure(
            data=[
                go.Heatmap(
                    z=[[None] * len(cols) for _ in rows],
                    x=[str(c) for c in cols],
                    y=rows,
                    colorscale="Viridis",
                    texttemplate="%{z:.0f}",
                    colorbar=dict(title="samples/s"),
                )
            ],
            layout=dict(
                title="grid: loader setting x batch size",
                height=80 + 40 * len(rows),
                xaxis_title="batch size",
                margin=dict(t=40, b=40, l=120, r=10),
            ),
        )
        self.advice_html = widgets.HTML()
        self.button = button("Run sweep", button_style="primary")
        self.button.on_click(lambda _: self.start())
        self.job = BackgroundJob(self.status, [self.button], "loader-sweep", on_end=self._ended)
        self.widget = widgets.VBox(
            [widgets.HBox([self.button, self.progress, self.status]), self.bars, self.heat, self.advice_html]
        )

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)

    # --- running -----------------------------------------------------------------------------
    @property
    def error(self) -> BaseException | None:
        return self.job.error

    def start(self) -> bool:
        """Sweep on a thread; the charts fill in as settings are measured."""
        self.records, self.table, self.advice = [], None, None
        return self.job.start(self._work)

    def wait(self, timeout: float | None = None):
        """The summary table once the sweep is done (its error raised, as the panel shows it)."""
        return self.job.wait(timeout)

    def _work(self):
        for rec in run_sweep(self.dataset, self.settings, self.rounds, self.max_batches, step=self.step):
            self.records.append(rec)
            if rec[EVENT] == MEASURE:
                self.progress.value = rec["done"]
                self.status.value = html.escape(
                    f"{rec['done']}/{rec['total']}: {rec['setting']} {rec[SAMPLES_PER_S]:.0f} samples/s"
                )
                if time.monotonic() - self._last_draw >= REDRAW_EVERY_S:
                    self._redraw()
            else:
                self.contention = rec.get("contention")
                if rec["leftover_processes"]:
                    self.status.value = f"worker processes left running: {rec['leftover_processes']}"
        self.table = summarize_sweep(self.records)
        self.advice = recommend(self.table, nproc=self.nproc)
        self._redraw()
        self._show_advice()
        return self.table

    def _ended(self, job: BackgroundJob) -> None:
        self.progress.bar_style = "danger" if job.error else "success"

    # --- drawing -------------------------------------------------------------------------------
    def _redraw(self) -> None:
        self._last_draw = time.monotonic()
        table = summarize_sweep(self.records)
        by_label = table.set_index("setting")
        labels = [s.label for s in self.settings]
        y = [by_label.samples_per_s.get(lbl) for lbl in labels]
        err = [(by_label.samples_per_s_spread.get(lbl) or 0) * (v or 0) / 2 for lbl, v in zip(labels, y)]
        z = [[None] * len(self._cols) for _ in self._rows]
        for s in self.settings:
            if s.label in by_label.index:
                z[self._rows.index(_row_label(s))][self._cols.index(s.batch_size)] = float(
                    by_label.samples_per_s[s.label]
                )
        with self.bars.batch_update():
            self.bars.data[0].y = y
            self.bars.data[0].error_y.array = err
        with self.heat.batch_update():
            self.heat.data[0].z = z

    def _show_advice(self) -> None:
        items = "".join(f"<li>{html.escape(r)}</li>" for r in self.advice["reasons"])
        busy = busy_sentence(self.contention)
        warn = f"<p style='color:#d62728'><b>machine busy:</b> {html.escape(busy)}</p>" if busy else ""
        self.advice_html.value = (
            f"<h4>Use {html.escape(self.advice['setting'])}: "
            f"{self.advice['speedup_vs_0_workers']:.2f}x the samples/s of 0 "
            f"workers</h4>{warn}<ul>{items}</ul>"
        )
        self.status.value = "done"


def wait_chart(summaries: dict[str, dict]) -> go.Figure:
    """For training runs {label: summary}: a bar per run split into time waiting for data and time
    computing, as shares of the step; the title of each bar says it in words."""
    labels, waits, computes, texts = [], [], [], []
    for label, summary in summaries.items():
        steps = [e for e in read_events(summary["run_dir"]) if e[EVENT] == STEP]
        steps = steps[warmup_steps(len(steps)) :]  # after warm-up, as the run's summary does
        wait = sum(e[DATA_WAIT_MS] for e in steps) / len(steps)
        total = sum(e[STEP_TIME_MS] for e in steps) / len(steps)
        labels.append(label)
        waits.append(wait)
        computes.append(total - wait)
        texts.append(wait_share_sentence(wait / total))
    fig = go.Figure(
        [
            go.Bar(name="waiting for data", x=labels, y=waits, hovertext=texts),
            go.Bar(name="computing", x=labels, y=computes),
        ]
    )
    fig.update_layout(
        barmode="stack",
        title="mean step time of each run, ms",
        height=320,
        yaxis_title="ms per step",
        margin=dict(t=40, b=40, l=60, r=10),
    )
    return fig
