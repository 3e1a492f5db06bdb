"""The comparison view: pick runs from the run store, overlay their curves, and a table of speedup
vs the first (baseline) run with its interval, threads, peak memory, final loss, accuracy and the
contention each run saw (`workbench.runstore.compare`). "Measure properly" runs the first two
runs' configs as an A/B test (alternating short runs, workbench.trials.config_ab) and shows its verdict.

    view = compare_view([run_a, run_b, run_c]); display(view)   # view.frame is the table
"""

from __future__ import annotations

import html
from pathlib import Path

import ipywidgets as widgets
import pandas as pd

from ..events import ATTEMPT, EVENT, LOSS, RANK, SAMPLES_PER_S, STEP, STEP_NUMBER, STEP_TIME_MS, read_events
from ..measure.ratios import speedup_text
from ..runfolder import RunFolder
from ..runstore import compare, list_runs, load_config
from ..trials.config_ab import ab_test
from .charts import COLORS, make_figure, publish, thin
from .job import BackgroundJob
from .sizing import button
from .table import html_table

SMOOTH = 10  # steps in the rolling median of the throughput curves
FORMATS = {
    SAMPLES_PER_S: "{:,.0f}",
    STEP_TIME_MS: "{:.2f}",
    "peak_mem_gib": "{:.3f}",
    "final_loss": "{:.4f}",
    "eval_accuracy": "{:.1%}",
    "other_cpu_cores": "{:.2f}",
}


def run_curves(run_dir: str | Path) -> pd.DataFrame:
    """Per step: rank 0's loss and the throughput summed over ranks (smoothed)."""
    steps = [r for r in read_events(run_dir) if r.get(EVENT) == STEP]
    if not steps:
        return pd.DataFrame(columns=[STEP_NUMBER, LOSS, SAMPLES_PER_S])
    df = pd.DataFrame(steps)
    last = df[df[ATTEMPT] == df[ATTEMPT].max()]
    loss = last[last[RANK] == last[RANK].min()].groupby(STEP_NUMBER)[LOSS].last()
    sps = last.groupby(STEP_NUMBER)[SAMPLES_PER_S].sum()
    sps = sps.rolling(SMOOTH, min_periods=1).median()
    return pd.DataFrame({LOSS: loss, SAMPLES_PER_S: sps}).reset_index()


def table_html(df: pd.DataFrame) -> str:
    if df.empty:
        return "<i>no runs to compare yet</i>"
    shown = df.copy()
    shown["speedup"] = [
        speedup_text(r, lo, hi) for r, lo, hi in zip(df["speedup"], df["speedup_low"], df["speedup_high"])
    ]
    # the load other programs put on the runs is said once, in the note below (which runs met it),
    # not in two columns of every row
    shown = shown.drop(
        columns=["speedup_low", "speedup_high", "busy", "other_cpu_cores", "threads"], errors="ignore"
    )  # threads: in each run's folder and summary
    for col, fmt in FORMATS.items():
        if col in shown:
            shown[col] = [
                fmt.format(v) if isinstance(v, (int, float)) and pd.notna(v) else "" for v in shown[col]
            ]
    return html_table(
        shown.to_dict("records"),
        list(shown.columns),
        where="the comparison table",
        css="wb-compare-table",
        below=(
            f"speedup: samples/s vs the first row, with its 95 % interval; "
            f"{df.attrs.get('note', '')}; peak memory: device peak on a GPU, RSS on a CPU"
        ),
    )


class CompareView:
    """Overlaid loss and throughput curves plus the comparison table; `picker` chooses the runs."""

    def __init__(self, run_dirs=(), root: str | Path | None = None, picker: bool = True):
        self.root = root
        self.run_dirs: list[Path] = [Path(p) for p in run_dirs]
        self.loss_fig = make_figure("Loss by run", "loss")
        self.speed_fig = make_figure(f"Throughput by run (median of {SMOOTH} steps)", "samples/s")
        self.table = widgets.HTML()
        self.picker = widgets.SelectMultiple(description="runs", rows=6, layout=widgets.Layout(width="880px"))
        self.picker.style.description_width = "40px"
        self.measure_button = button(
            "Measure properly (A/B)",
            icon="balance-scale",
            tooltip="run the first two runs' configs in alternating rounds and compare them with an interval",
        )
        self.ab_status = widgets.HTML()
        self.ab_job = BackgroundJob(self.ab_status, [self.measure_button], "compare-ab")
        self.ab_result = None
        self.measure_button.on_click(lambda _: self.measure())
        parts = [
            widgets.HBox([self.loss_fig, self.speed_fig]),
            self.table,
            widgets.HBox([self.measure_button, self.ab_status]),
        ]
        if picker:
            self._fill_picker()
            self.picker.observe(lambda ch: self.refresh(ch["new"]), names="value")
            parts.insert(0, self.picker)
        self.widget = widgets.VBox(parts)
        self.frame = pd.DataFrame()
        self.refresh(self.run_dirs)

    def _fill_picker(self) -> None:
        df = list_runs(self.root)
        options = [(f"{r['run']}  [{r.get('status', '')}]", str(r["path"])) for _, r in df.iterrows()]
        known = {p for _, p in options}
        options += [(p.name, str(p)) for p in self.run_dirs if str(p) not in known]
        self.picker.options = options
        self.picker.value = tuple(str(p) for p in self.run_dirs)

    def add(self, run_dir: str | Path) -> None:
        """Append a run (the panel calls this when one of its runs ends)."""
        self.run_dirs.append(Path(run_dir))
        if self.picker in self.widget.children:
            self._fill_picker()  # its observer redraws
        else:
            self.refresh(self.run_dirs)

    def refresh(self, run_dirs=None) -> None:
        if run_dirs is not None:
            self.run_dirs = [Path(p) for p in run_dirs]
        self.frame = compare(self.run_dirs) if self.run_dirs else pd.DataFrame()
        curves = [(p.name, run_curves(p)) for p in self.run_dirs]
        for fig, key in ((self.loss_fig, LOSS), (self.speed_fig, SAMPLES_PER_S)):
            while len(fig.data) < len(curves):
                fig.add_scatter(x=[], y=[], mode="lines")
            with fig.batch_update():
                for i, trace in enumerate(fig.data):
                    if i < len(curves):
                        name, df = curves[i]
                        x, y = thin(df[STEP_NUMBER].tolist(), df[key].tolist())
                        trace.x, trace.y, trace.name = x, y, name
                        trace.line = {"color": COLORS[i % len(COLORS)], "width": 1.5}
                    else:
                        trace.x, trace.y, trace.name = [], [], ""
            publish(fig)
        self.table.value = table_html(self.frame)

    def measure(self, rounds: int | None = None, wait: bool = False):
        """The A/B test of the first two runs' configs (the first is A); wait=True blocks."""
        if len(self.run_dirs) < 2:
            self.ab_status.value = "pick two runs to compare"
            return None
        scripts = [p.name for p in self.run_dirs[:2] if RunFolder(p).is_script()]
        if scripts:  # their commands are measured by `ab --cmd`, which runs them afresh
            self.ab_status.value = html.escape(
                f"{scripts[0]} is your own script's run: measure two scripts with `workbench ab "
                "--cmd \"python train.py\" --vs-cmd \"python train.py --bf16\"`"
            )
            return None
        a, b = (load_config(p) for p in self.run_dirs[:2])
        labels = (self.run_dirs[0].name, self.run_dirs[1].name)

        def work():
            self.ab_status.value = html.escape(
                f"running {labels[0]} and {labels[1]} in alternating slices..."
            )
            self.ab_result = ab_test(a, b, rounds, labels)
            self.ab_status.value = "<pre>" + html.escape(self.ab_result.text()) + "</pre>"
            return self.ab_result

        if self.ab_job.start(work) and wait:
            self.ab_job.join()
        return self.ab_job

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


def compare_view(run_dirs=(), root: str | Path | None = None, picker: bool = True) -> CompareView:
    """A comparison of `run_dirs` (the first is the baseline); the picker lists the run store."""
    return CompareView(run_dirs, root, picker)
