"""The stacking panel: pick changes, run the study on a thread, watch a waterfall of samples/s fill
in step by step (with peak memory and final loss beside it), then export what was kept: the config
of the steps measured faster, and only those.

    from workbench.ui.stacking import StackingPanel
    panel = StackingPanel(RunConfig.default(), ["bf16", "workers", "ddp"]); display(panel)
"""

from __future__ import annotations

import html
import shlex
import threading

import ipywidgets as w
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..config import RunConfig
from ..export import export
from ..events import STEP_TIME_MS
from ..trials.changes import CHANGES, STACK_STEP, STACKED, as_change
from ..measure.ratios import min_rounds, speedup_text
from ..stacking.study import run_study
from ..stacking.waterfall import number, waterfall_records
from .charts import wrapped
from .figure import LiveFigure
from .job import BackgroundJob
from .sizing import button
from .table import html_table, load_line, status_color

# held: weights, gradients, optimizer state and activations, as the table's note says
TRAINING_SIDE = (("mem_held_mib", "held by rank 0 (MiB)"), ("final_loss", "final loss"))
INFERENCE_SIDE = (("size_mib", "model size (MiB)"), ("accuracy", "accuracy"))


class Waterfall:
    """Samples/s as a waterfall (baseline, one bar per step, the total) and two side panels of other
    figures per step (peak memory and final loss for training; size and accuracy for inference)."""

    def __init__(self, df=None, side=TRAINING_SIDE, title: str = "samples/s, step by step"):
        self.side = side
        self.fig = LiveFigure(
            make_subplots(
                rows=1,
                cols=3,
                column_widths=[0.56, 0.22, 0.22],
                horizontal_spacing=0.07,
                subplot_titles=(title, wrapped(side[0][1], 200, 13), wrapped(side[1][1], 200, 13)),
            )
        )
        # Floating bars, not go.Waterfall: a waterfall colours a bar by its direction, and a step
        # that went up within noise must not be drawn as a gain; each bar here takes its verdict's.
        self.fig.add_trace(
            go.Bar(name="samples/s", x=[], y=[], base=[], text=[], textposition="outside"), row=1, col=1
        )
        for col, (column, _), color in ((2, side[0], "#9467bd"), (3, side[1], "#ff7f0e")):
            self.fig.add_trace(
                go.Bar(
                    name=column,
                    x=[],
                    y=[],
                    text=[],
                    marker_color=color,
                    textposition="outside",
                    cliponaxis=False,
                ),
                row=1,
                col=col,
            )
        # labels never shrink below a readable size: one that does not fit is left to the hover
        self.fig.update_layout(
            height=450,
            showlegend=False,
            margin=dict(t=70, b=110, l=50, r=20),
            uniformtext=dict(minsize=10, mode="hide"),
        )
        self.fig.update_xaxes(tickangle=-35)
        if df is not None:
            self.update(df)

    def update(self, df) -> None:
        """Put the table's figures into the three panels in one batched update."""
        wf = waterfall_records(df)
        rows = df.to_dict("records")
        labels = [r[STACK_STEP] for r in rows]
        with self.fig.batch_update():
            # on the bar its figure alone, the interval and the reason on hover: long labels on
            # narrow bars run into each other
            self.fig.data[0].update(
                x=wf["x"],
                y=wf["y"],
                base=wf["base"],
                hovertext=wf["text"],
                text=[
                    "" if s in ("skipped", "failed") else t.split(" ")[0]
                    for t, s in zip(wf["text"], wf["status"])
                ],
                marker_color=[status_color(s) for s in wf["status"]],
            )
            for trace, (column, _) in zip(self.fig.data[1:], self.side):
                values = [number(r.get(column)) for r in rows]
                trace.update(x=labels, y=values, text=[f"{v:.3g}" if v is not None else "" for v in values])


def waterfall_figure(df=None, side=TRAINING_SIDE, title: str = "samples/s, step by step") -> go.FigureWidget:
    """A finished study's table as a figure (the panel keeps its Waterfall to redraw live)."""
    return Waterfall(df, side, title).fig


def table_html(df) -> str:
    """The study table: each step's verdict as a chip, its gain with its interval; skipped and
    failed steps say why, folded behind their first clause. What a reader does not compare step
    by step (each run's steps, threads, step time, the folder) stays in the DataFrame; the load
    other programs put on the machine is said once above."""
    records = df.to_dict("records")
    # a reason (skipped, failed) and a note (what else the step changed) share one column, and the
    # dropped pairs sit beside the pairs: the table fits a notebook's cell
    hidden = {"run_dir", "gain_low", "gain_high", "steps", STEP_TIME_MS, "threads", "other_cpu_cores"}
    hidden |= {"dropped", "reason", "note"}
    shown = [c for c in df.columns if c not in hidden] + ["why"]
    rows = []
    for r in records:
        r["why"] = "; ".join(str(r[k]) for k in ("reason", "note") if r.get(k) and r[k] == r[k])
        dropped = number(r.get("dropped"))
        if dropped and number(r.get("rounds")) is not None:
            r["rounds"] = f"{int(number(r['rounds']))} ({int(dropped)} dropped)"
        if "kept" in r:
            kept = r["kept"]
            r["kept"] = "" if kept is None or kept != kept else ("yes" if kept else "no")
        if "gain_low" in r:
            r["gain_vs_prev"] = speedup_text(
                number(r["gain_vs_prev"]), number(r["gain_low"]), number(r["gain_high"])
            )
        rows.append(r)
    return html_table(
        rows, shown, above=load_line(r.get("other_cpu_cores") for r in records), where="the stacking table"
    )


class StackingPanel(w.VBox):
    """Checkboxes for the changes, Run / Stop, the live waterfall, the table, and an Export button."""

    def __init__(
        self,
        baseline: RunConfig,
        selected=("bf16", "channels_last", "workers", "ddp"),
        choices=None,
        export_dir: str = "exported",
        rounds: int | None = None,
    ):
        self.baseline = baseline
        self.rounds = rounds or min_rounds()
        choices = [as_change(c) for c in (choices or [CHANGES[k] for k in STACKED])]
        chosen = {as_change(c).key for c in selected}
        self.order = [as_change(c).key for c in selected]  # the list the study runs, in its order
        self.boxes = {
            c.key: w.Checkbox(
                value=c.key in chosen,
                description=c.label,
                tooltip=c.why,
                indent=False,
                layout=w.Layout(width="170px"),
            )
            for c in choices
        }
        self.changes = {c.key: c for c in choices}
        self.run_button = button("Run study", button_style="primary", icon="play")
        self.stop_button = button("Stop after this run", icon="stop", disabled=True)
        self.export_dir = w.Text(value=export_dir, description="export to", layout=w.Layout(width="320px"))
        self.export_button = button("Export what was kept", icon="download", disabled=True)
        self.status = w.HTML("Pick the changes, then run. Each step is a real training run.")
        self.waterfall = Waterfall()
        self.fig = self.waterfall.fig
        self.table = w.HTML()
        self.export_out = w.HTML()
        self.rows: list[dict] = []
        self._stop = threading.Event()
        self.job = BackgroundJob(self.status, [self.run_button], "stacking-study", on_end=self._ended)
        self.run_button.on_click(lambda _: self.start())
        self.stop_button.on_click(lambda _: self._stop.set())
        self.export_button.on_click(lambda _: self.export())
        super().__init__(
            [
                w.HBox(list(self.boxes.values()), layout=w.Layout(flex_flow="row wrap")),
                w.HBox([self.run_button, self.stop_button]),
                self.status,
                self.fig,
                self.table,
                w.HBox([self.export_dir, self.export_button]),
                self.export_out,
            ]
        )

    def selected_changes(self) -> list:
        """The ticked changes in the order the study tries them: the order given, then any ticked
        later in the order of the boxes."""
        ticked = [k for k, box in self.boxes.items() if box.value]
        ordered = [k for k in self.order if k in ticked] + [k for k in ticked if k not in self.order]
        return [self.changes[k] for k in ordered]

    def plan(self):
        """The plan of the ticked changes, as the study will run them (a DataFrame)."""
        from ..stacking.plan import plan_table

        return plan_table(self.baseline, self.selected_changes())

    @property
    def result(self):
        return self.job.result

    @property
    def error(self) -> BaseException | None:
        return self.job.error

    def start(self) -> bool:
        """Run the study on a thread; the chart and table fill in after every run."""
        if self.job.busy():
            return False
        changes = self.selected_changes()
        n_runs = self.rounds
        self.rows = []
        self._stop.clear()
        self.stop_button.disabled, self.export_button.disabled = False, True
        self.status.value = (
            f"trying {len(changes)} change(s) one at a time, each in {self.rounds} rounds of slices "
            "against the best config so far..."
        )
        return self.job.start(lambda: self._work(changes, n_runs))

    def _work(self, changes, n_runs: int):
        runs = [0]

        def on_update(df):
            runs[0] += 1
            self.rows = df.to_dict("records")
            self.waterfall.update(df)
            self.table.value = table_html(df)
            self.status.value = f"{runs[0]} round(s) of slices done; {len(df)} row(s) decided"

        result = run_study(
            self.baseline, changes, rounds=self.rounds, on_update=on_update, stop=self._stop.is_set
        )
        self.rows = result.to_dict("records")
        self.kept = dict(result.attrs.get("kept", {}))
        self._best = result.attrs.get("best_run_dir")
        stopped = " (stopped early)" if self._stop.is_set() else ""
        self.status.value = html.escape(f"done{stopped}: {kept_sentence(result)}")
        return result

    def _ended(self, job: BackgroundJob) -> None:
        self.stop_button.disabled = True
        self.export_button.disabled = self.best_run_dir() is None

    def wait(self, timeout: float | None = None):
        """The study's table once it ends (its error raised, as the panel shows it)."""
        return self.job.wait(timeout)

    def best_run_dir(self) -> str | None:
        """The run folder of the best config the study measured: the baseline with what was kept."""
        return getattr(self, "_best", None)

    def export(self, to_dir: str | None = None):
        run_dir = self.best_run_dir()
        if run_dir is None:
            self.export_out.value = "Run the study first: the export takes its last completed step."
            return None
        try:
            result = export(run_dir, to_dir or self.export_dir.value, overwrite=True)
        except Exception as e:  # a bad folder name: say so in the panel
            self.export_out.value = f"<b>export failed</b>: {html.escape(str(e))}"
            return None
        files = ", ".join(p.name for p in result.files)
        kept = ", ".join(f"{k}={v}" for k, v in getattr(self, "kept", {}).items())
        holds = (
            f"the baseline with what was measured faster: {kept}"
            if kept
            else "the baseline: no step was measured faster here, so nothing is called what helped"
        )
        self.export_out.value = (
            f"Wrote {html.escape(files)} to <code>{html.escape(str(result.dir))}</code>: "
            f"{html.escape(holds)}"
            f"<br>one node: <code>{html.escape(shlex.join(result.single_node))}</code>"
            f"<br>multi-node: <code>{html.escape(shlex.join(result.multi_node))}</code>"
        )
        return result


def kept_sentence(df) -> str:
    """'kept + bf16, + 2 loader workers: 1.42x the baseline by their product; measured side by side
    1.38x [1.30, 1.47]', from the study's table."""
    from ..stacking.study import TOTAL

    rows = df.to_dict("records")
    kept = [r[STACK_STEP] for r in rows if r.get("kept") is True and r["status"] != "baseline"]
    if not kept:
        return "no step was measured faster than the baseline: nothing kept"
    product = df.attrs.get("product", 1.0)
    said = f"kept {', '.join(kept)}: {product:.2f}x the baseline by their product"
    total = next((r for r in rows if r[STACK_STEP] == TOTAL), None)
    if total and number(total.get("gain_vs_prev")) is not None:
        gain = speedup_text(
            number(total["gain_vs_prev"]), number(total.get("gain_low")), number(total.get("gain_high"))
        )
        said += f"; measured side by side against the baseline {gain}, {total['status']}"
    return said
