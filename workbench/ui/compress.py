"""The pruning and quantization lab: widgets and live charts over workbench.compress (sweep, variants).

    from workbench.ui.compress import CompressLab
    lab = CompressLab(subject); lab            # display it, press Sweep / Compare variants
    lab.sweep(wait=True); lab.compare(wait=True)   # the same from code (used by the notebook)

Charts: accuracy vs sparsity (its title says the share of the model's weights the pruning
reaches), latency vs sparsity (median with the p10-p90 spread), and an accuracy-latency Pareto
plot of the sweep points and every variant, each labelled with its paired speedup, interval and
rounds; a table with coverage, the speedups with their intervals and the verdicts.
Work runs on a background thread; charts redraw inside `fig.batch_update()` once per point.
"""

from __future__ import annotations

import threading

import ipywidgets as W
import plotly.graph_objects as go

from ..measure.ratios import speedup_text
from .table import html_table
from ..compress.long_search import search_progress
from ..compress.stats import busy_note, conditions_line, speedup_label, speedup_short
from ..compress.subject import Subject
from ..compress.prune_sweep import SweepConfig, iter_sweep
from ..compress.variants import compare_variants, pareto_front
from .charts import set_title
from .figure import LiveFigure
from .job import BackgroundJob
from .refusing import RefusingIntSlider
from .sizing import FULL_LABEL, button

TABLE_COLUMNS = [
    "variant",
    "backend",
    "converted",
    "coverage",
    "accuracy",
    "params",
    "size_ratio",
    "speedup b1",
    "speedup b{big}",
    "verdict",
]  # each row's why is printed beside the table (a why column squeezed the table to a word a line)


def _figure(title: str, x: str, y: str) -> go.FigureWidget:
    fig = LiveFigure(
        layout=dict(
            title=title,
            height=320,
            width=460,
            xaxis_title=x,
            yaxis_title=y,
            margin=dict(l=50, r=10, t=40, b=40),
        )
    )
    return fig


class CompressLab:
    """Sweep pruning amounts and compare compressed variants of `subject`'s model."""

    def __init__(self, subject: Subject, big_batch: int = 64, rounds: int = 15):
        self.subject, self.big, self.rounds = subject, big_batch, rounds
        self.records: list[dict] = []
        self.variants = None
        self._stop = threading.Event()
        self.method = W.Dropdown(
            options=["magnitude", "random", "structured"], value="magnitude", description="method"
        )
        self.scope = W.Dropdown(options=["global", "layer"], value="global", description="scope")
        # Percent as whole numbers: a slider's typed-in readout is taken as its value, so a
        # fraction slider shown as "50%" read a typed "50" as 5000 % and stopped at its maximum.
        self.max_amount = RefusingIntSlider(value=90, min=10, max=95, step=5, description="up to %")
        self.points = RefusingIntSlider(value=5, min=2, max=12, description="points")
        self.epochs = RefusingIntSlider(value=0, min=0, max=10, description="fine-tune ep.", style=FULL_LABEL)
        self.amount = RefusingIntSlider(
            value=50, min=0, max=95, step=5, description="variants at %", style=FULL_LABEL
        )
        self.sweep_button = button("Sweep", button_style="primary")
        self.compare_button = button("Compare variants")
        self.stop_button = button("Stop", button_style="warning")
        self.progress = W.IntProgress(value=0, min=0, max=1, description="progress")
        self.status = W.Label("")
        self.table = W.HTML("")
        self.acc_fig = _figure("Accuracy vs sparsity", "amount pruned", "accuracy")
        self.lat_fig = _figure("Latency vs sparsity", "amount pruned", "latency (ms)")
        self.pareto_fig = _figure(
            f"Accuracy vs latency (batch {big_batch})", f"latency at batch {big_batch} (ms)", "accuracy"
        )
        self.sweep_button.on_click(lambda _: self.sweep())
        self.compare_button.on_click(lambda _: self.compare())
        self.stop_button.on_click(lambda _: self._stop.set())
        self.job = BackgroundJob(self.status, [self.sweep_button, self.compare_button], "compress-lab")
        controls = W.VBox(
            [
                W.HBox([self.method, self.scope]),
                W.HBox([self.max_amount, self.points]),
                W.HBox([self.epochs, self.amount]),
                W.HBox([self.sweep_button, self.compare_button, self.stop_button]),
                W.HBox([self.progress, self.status]),
            ]
        )
        self.widget = W.VBox([controls, W.HBox([self.acc_fig, self.lat_fig]), self.pareto_fig, self.table])

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)

    # --- actions -------------------------------------------------------------------------
    def sweep_config(self) -> SweepConfig:
        n, top = self.points.value, self.max_amount.value / 100
        amounts = [round(top * i / (n - 1), 4) for i in range(n)]
        return SweepConfig(
            amounts=amounts,
            method=self.method.value,
            scope=self.scope.value,
            finetune_epochs=self.epochs.value,
            batch_sizes=(1, self.big),
            rounds=self.rounds,
        )

    def sweep(self, wait: bool = False) -> None:
        """Run the sweep on a thread (wait=True: until it ends); charts fill in point by point."""
        scfg = self.sweep_config()
        self._start(lambda: self._sweep(scfg), len(scfg.amounts), wait)

    def compare(self, wait: bool = False) -> None:
        """Build and time every variant on a thread (wait=True: until it ends)."""
        amount = self.amount.value / 100
        self._start(lambda: self._compare(amount), 1, wait)

    def wait(self, timeout: float | None = None):
        """The sweep's records or the variants table once done (its error raised)."""
        return self.job.wait(timeout)

    def _start(self, work, steps: int, wait: bool) -> None:
        if self.job.busy():
            return
        self._stop.clear()
        self.progress.max, self.progress.value = steps, 0
        self.job.start(work)
        if wait:
            self.job.join()

    def _said(self, line: str) -> None:  # a long dependency-graph search says what it is doing
        self.status.value = line

    def _sweep(self, scfg: SweepConfig) -> list[dict]:
        self.records = []
        with search_progress(self._said):  # set in the worker thread, which runs the search
            for rec in iter_sweep(self.subject, scfg, stop=self._stop):
                self.records.append(rec)
                self.progress.value = len(self.records)
                self.status.value = f"{rec['amount']:.0%}: {rec['verdict']}"
                self.redraw()
        busy = next((busy_note(r) for r in self.records if r.get("busy")), "")
        self.status.value = (
            "stopped"
            if self._stop.is_set()
            else f"sweep done ({scfg.method})" + (f"; {busy}" if busy else "")
        )
        return self.records

    def _compare(self, amount: float):
        self.status.value = "building and timing every variant..."
        with search_progress(self._said):
            self.variants = compare_variants(
                self.subject, amount, self.epochs.value, batch_sizes=(1, self.big), rounds=self.rounds
            )
        self.progress.value = 1
        self.status.value = "variants compared"
        self.redraw()
        return self.variants

    # --- drawing -------------------------------------------------------------------------
    def redraw(self) -> None:
        recs, big = self.records, self.big
        x = [r["amount"] for r in recs]
        with self.acc_fig.batch_update():
            self.acc_fig.data = []
            if recs:  # how much of the model the amounts are about
                set_title(
                    self.acc_fig,
                    f"Accuracy vs amount ({recs[-1]['method']} reaches "
                    f"{recs[-1]['coverage']:.0%} of the weights)",
                )
            self.acc_fig.add_scatter(x=x, y=[r["accuracy"] for r in recs], name="after pruning")
            if recs and "accuracy_finetuned" in recs[0]:
                self.acc_fig.add_scatter(
                    x=x, y=[r["accuracy_finetuned"] for r in recs], name="after fine-tune"
                )
        with self.lat_fig.batch_update():
            self.lat_fig.data = []
            for b in (1, big):
                key = f"latency_b{b}"
                med = [r[f"{key}_ms"] for r in recs]
                self.lat_fig.add_scatter(
                    x=x,
                    y=med,
                    name=f"pruned, batch {b}",
                    error_y=dict(
                        type="data",
                        symmetric=False,
                        array=[r[f"{key}_p90_ms"] - m for r, m in zip(recs, med)],
                        arrayminus=[m - r[f"{key}_p10_ms"] for r, m in zip(recs, med)],
                    ),
                )
                self.lat_fig.add_scatter(
                    x=x,
                    y=[r[f"dense_{key}_ms"] for r in recs],
                    name=f"dense, batch {b}",
                    line=dict(dash="dot"),
                )
        self._draw_pareto()

    def _draw_pareto(self) -> None:
        big, recs = self.big, self.records
        with self.pareto_fig.batch_update():
            self.pareto_fig.data = []
            if recs:
                acc = "accuracy_finetuned" if "accuracy_finetuned" in recs[0] else "accuracy"
                self.pareto_fig.add_scatter(
                    x=[r[f"latency_b{big}_ms"] for r in recs],
                    y=[r[acc] for r in recs],
                    mode="markers+lines",
                    name=f"sweep ({recs[0]['method']})",
                    hovertext=[
                        f"{r['amount']:.0%}, coverage {r['coverage']:.0%}: {speedup_label(r, big)}"
                        for r in recs
                    ],
                )
            df = self.variants
            if df is not None:
                m = df[df["verdict"] != "skipped"]
                front = set(pareto_front(m, f"latency_b{big}_ms"))
                # each variant named in the legend, not on the plot, where close points pile up
                for r in m.to_dict("records"):
                    name = (
                        r["variant"]
                        if r["variant"] == "dense"
                        else f"{r['variant']}: {speedup_short(r, big)}"
                    )
                    self.pareto_fig.add_scatter(
                        x=[r[f"latency_b{big}_ms"]],
                        y=[r["accuracy"]],
                        mode="markers",
                        name=name + (" (front)" if r["variant"] in front else ""),
                        marker=dict(size=12 if r["variant"] in front else 7),
                    )
                # latencies span orders of magnitude (a slow backend beside the rest): a log axis
                self.pareto_fig.update_layout(
                    xaxis_type="log",
                    legend=dict(orientation="h", y=-0.35, font=dict(size=10)),
                    height=320 + 18 * len(m),
                )
                self.table.value = self.table_html(df)

    def table_html(self, df) -> str:
        """The variants table: coverage, each speedup with its interval, verdicts; the pairs and the
        load said once above it, the skipped variants' reasons below it."""
        shown = df.copy()
        records = df.to_dict("records")
        for b in (1, self.big):
            shown[f"speedup b{b}"] = [
                speedup_text(r.get(f"speedup_b{b}"), r.get(f"speedup_b{b}_low"), r.get(f"speedup_b{b}_high"))
                if r.get("verdict") != "skipped"
                else ""
                for r in records
            ]
        cols = [c.format(big=self.big) for c in TABLE_COLUMNS]
        cols = [c for c in cols if c in shown.columns]
        pairs = sorted(
            {int(r[k]) for r in records for k in r if k.endswith("_rounds") and r[k] == r[k] and r[k]}
        )
        said = conditions_line(records)  # once above the rows, not in every cell
        said += (
            f"; each speedup against the dense model over {', '.join(map(str, pairs))} pairs" if pairs else ""
        )
        skipped = "; ".join(
            f"{r['variant']} skipped: {r.get('why', '')}" for r in records if r.get("verdict") == "skipped"
        )
        return html_table(
            shown.to_dict("records"), cols, above=said, below=skipped, where="the compression table"
        )
