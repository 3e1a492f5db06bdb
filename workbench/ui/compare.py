"""The comparison view: pick runs from the run store, overlay their curves, and a table of speedup
vs the first (baseline) run, peak memory, final loss and accuracy (`workbench.runstore.compare`).

    view = compare_view([run_a, run_b, run_c]); display(view)   # view.frame is the table
"""
from __future__ import annotations

import html
from pathlib import Path

import ipywidgets as widgets
import pandas as pd

from ..events import read_events
from ..runstore import compare, list_runs
from .charts import COLORS, make_figure, publish, thin

SMOOTH = 10  # steps in the rolling median of the throughput curves
FORMATS = {"samples_per_s": "{:,.0f}", "speedup": "{:.2f}x", "step_time_ms": "{:.2f}",
           "peak_mem_gib": "{:.3f}", "final_loss": "{:.4f}", "eval_accuracy": "{:.1%}"}


def run_curves(run_dir: str | Path) -> pd.DataFrame:
    """Per step: rank 0's loss and the throughput summed over ranks (smoothed)."""
    steps = [r for r in read_events(run_dir) if r.get("event") == "step"]
    if not steps:
        return pd.DataFrame(columns=["step", "loss", "samples_per_s"])
    df = pd.DataFrame(steps)
    last = df[df["attempt"] == df["attempt"].max()]
    loss = last[last["rank"] == last["rank"].min()].groupby("step")["loss"].last()
    sps = last.groupby("step")["samples_per_s"].sum()
    sps = sps.rolling(SMOOTH, min_periods=1).median()
    return pd.DataFrame({"loss": loss, "samples_per_s": sps}).reset_index()


def table_html(df: pd.DataFrame) -> str:
    if df.empty:
        return "<i>no runs to compare yet</i>"
    shown = df.copy()
    for col, fmt in FORMATS.items():
        if col in shown:
            shown[col] = [fmt.format(v) if isinstance(v, (int, float)) and pd.notna(v) else ""
                          for v in shown[col]]
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in shown.columns)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                   for row in shown.itertuples(index=False))
    return (f"<table class='wb-compare-table' style='border-collapse:collapse;font-size:12px'>"
            f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
            "<div style='font-size:11px;color:#666'>speedup: samples/s vs the first row; "
            "peak memory: device peak on a GPU, RSS on a CPU</div>")


class CompareView:
    """Overlaid loss and throughput curves plus the comparison table; `picker` chooses the runs."""

    def __init__(self, run_dirs=(), root: str | Path | None = None, picker: bool = True):
        self.root = root
        self.run_dirs: list[Path] = [Path(p) for p in run_dirs]
        self.loss_fig = make_figure("Loss by run", "loss")
        self.speed_fig = make_figure(f"Throughput by run (median of {SMOOTH} steps)", "samples/s")
        self.table = widgets.HTML()
        self.picker = widgets.SelectMultiple(description="runs", rows=6,
                                             layout=widgets.Layout(width="880px"))
        self.picker.style.description_width = "40px"
        parts = [widgets.HBox([self.loss_fig, self.speed_fig]), self.table]
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
        for fig, key in ((self.loss_fig, "loss"), (self.speed_fig, "samples_per_s")):
            while len(fig.data) < len(curves):
                fig.add_scatter(x=[], y=[], mode="lines")
            with fig.batch_update():
                for i, trace in enumerate(fig.data):
                    if i < len(curves):
                        name, df = curves[i]
                        x, y = thin(df["step"].tolist(), df[key].tolist())
                        trace.x, trace.y, trace.name = x, y, name
                        trace.line = {"color": COLORS[i % len(COLORS)], "width": 1.5}
                    else:
                        trace.x, trace.y, trace.name = [], [], ""
            publish(fig)
        self.table.value = table_html(self.frame)

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


def compare_view(run_dirs=(), root: str | Path | None = None, picker: bool = True) -> CompareView:
    """A comparison of `run_dirs` (the first is the baseline); the picker lists the run store."""
    return CompareView(run_dirs, root, picker)
