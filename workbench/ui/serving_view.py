"""The serving lab's charts and table: latency percentiles and throughput by load level, drawn as
a load ramp goes, and servers compared side by side.

    view = LoadView()
    view.widget                                   # two charts side by side
    report = view.ramp(url, concurrency=[1, 4, 16])   # the charts gain a point a level
    comparison_table(compare_servers({...}))      # each server against the reference
"""

from __future__ import annotations

import ipywidgets as widgets

from ..serving.bounds import MAX_REQUESTS
from ..serving.load_generator import Level, drive, run_coroutine
from .charts import make_figure, publish
from .table import Table

PERCENTILE_COLORS = {"p50": "#636efa", "p90": "#00cc96", "p99": "#ef553b"}


class LoadView:
    def __init__(self, xlabel: str = "clients at once"):
        self.latency = make_figure("Latency by load", "ms", xlabel=xlabel)
        self.throughput = make_figure("Throughput by load", "requests/s", xlabel=xlabel)
        for q, color in PERCENTILE_COLORS.items():
            self.latency.add_scatter(x=[], y=[], name=q, mode="lines+markers", line={"color": color})
        self.throughput.add_scatter(x=[], y=[], name="answered/s", mode="lines+markers")
        self.widget = widgets.HBox([self.latency, self.throughput])
        self.records: list[dict] = []

    def add(self, record: dict) -> None:
        """One level's figures (workbench.serving.load_generator), drawn with the percentiles' intervals."""
        self.records.append(record)
        xs = [r["value"] for r in self.records]
        with self.latency.batch_update():
            for trace in self.latency.data:
                q = trace.name
                ys = [r[f"{q}_ms"] for r in self.records]
                lo = [
                    r[f"{q}_ms"] - r[f"{q}_ms_interval"][0] if r[f"{q}_ms_interval"][0] is not None else 0
                    for r in self.records
                ]
                hi = [
                    r[f"{q}_ms_interval"][1] - r[f"{q}_ms"] if r[f"{q}_ms_interval"][1] is not None else 0
                    for r in self.records
                ]
                trace.x, trace.y = xs, ys
                trace.error_y = {"type": "data", "array": hi, "arrayminus": lo, "visible": True}
        with self.throughput.batch_update():
            self.throughput.data[0].x = xs
            self.throughput.data[0].y = [r["throughput_rps"] for r in self.records]
        publish(self.latency)
        publish(self.throughput)

    def ramp(self, url: str, concurrency: list[int], duration_s: float = 3.0, warmup_s: float = 0.5) -> dict:
        """Closed-loop levels against the server at `url`, each drawn as it ends."""
        levels = [Level("concurrency", c) for c in concurrency]
        return run_coroutine(drive(url, levels, duration_s, warmup_s, MAX_REQUESTS, on_level=self.add))


def comparison_table(report: dict) -> Table:
    """Each server's throughput against the reference's, with its interval and verdict, and its
    latency percentiles: the engine's comparison, as a notebook shows it."""
    rows = []
    for label, v in report["variants"].items():
        reference = label == report["reference"]
        rows.append(
            {
                "variant": label,
                "requests_per_s": v["throughput_rps"],
                "throughput_ratio": 1.0 if reference else v.get("throughput"),
                "throughput_low": None if reference else v.get("throughput_low"),
                "throughput_high": None if reference else v.get("throughput_high"),
                "verdict": "baseline" if reference else v.get("throughput_verdict"),
                "p50_ms": v["p50_ms"],
                "p99_ms": v["p99_ms"],
                "pairs": None if reference else v.get("throughput_pairs"),
            }
        )
    conditions = next(
        (v["throughput_conditions"] for v in report["variants"].values() if v.get("throughput_conditions")),
        "",
    )
    return Table(
        rows,
        ["variant", "requests_per_s", "throughput_ratio", "verdict", "p50_ms", "p99_ms"],
        intervals={"throughput_ratio": ("throughput_low", "throughput_high")},
        above=f"at concurrency {report['concurrency']}, against {report['reference']}; "
        f"{conditions if conditions != 'quiet' else 'a quiet machine'}",
        where="the serving comparison",
    )
