"""Widgets of the hardware lab: the report, the micro-benchmarks with a progress bar, the roofline,
MFU of a run, and the GPU chooser. Core work lives in workbench.hardware; this module only draws.

    from workbench.ui.hardware import report_widget, BenchPanel, roofline_figure, ChooserPanel
"""

from __future__ import annotations

import html
import math

import ipywidgets as widgets
import plotly.graph_objects as go

from ..events import EVENT, MFU, STEP, STEP_NUMBER, read_events
from ..hardware.ceiling import Ceiling
from ..hardware.chooser import choose
from ..hardware.microbench import run_benchmarks
from ..hardware.machine_report import hardware_report
from ..hardware.roofline import attainable
from ..machine import peaks
from ..machine.cpu import isa_text
from ..runstore import read_summary
from .curve import RollingMedian
from .dashboard import mfu_text
from .charts import log_log, set_title
from .figure import LiveFigure
from .job import BackgroundJob
from .refusing import RefusingFloatLogSlider
from .sizing import button
from .table import load_line

_COLORS = {"fp32": "#1f77b4", "tf32": "#17becf", "bf16": "#2ca02c", "fp16": "#ff7f0e", "int8": "#9467bd"}


def _table(rows: list[tuple[str, str]]) -> str:
    cells = "".join(
        f"<tr><th style='text-align:left;padding-right:1em'>{html.escape(k)}</th>"
        f"<td style='text-align:left'>{html.escape(str(v))}</td></tr>"
        for k, v in rows
    )
    return f"<table>{cells}</table>"


def report_widget(rep: dict | None = None) -> widgets.HTML:
    """The hardware report as an HTML table."""
    rep = rep or hardware_report()
    c, m, t, g = rep["cpu"], rep["memory"], rep["torch"], rep["gpu"]
    rows = [
        (
            "CPU",
            f"{c['model']} ({c['arch']}), {c['logical_cpus']} logical CPUs, "
            f"torch uses {c['torch_threads']} threads",
        ),
        ("Instruction sets", isa_text(c)),
        ("Memory", f"{m.get('total_gib', '?')} GiB ({m.get('available_gib', '?')} available)"),
        (
            "torch",
            f"{t['torch']}; CUDA {t['cuda'] or 'none'}; cuDNN {t['cudnn'] or 'none'}; "
            f"oneDNN {'yes' if t['onednn'] else 'no'}",
        ),
    ]
    if not g["count"]:
        rows.append(("GPU", "none: torch.cuda.is_available() is False"))
    else:
        rows.append(("Driver", f"{g.get('driver') or '?'} (CUDA {g.get('driver_cuda') or '?'})"))
        for d in g["gpus"]:
            dts = ", ".join(k for k, on in d["dtypes"].items() if on)
            rows.append(
                (
                    f"GPU {d['index']}",
                    f"{d['name']}, capability {d['capability']}, {d['sms']} SMs, "
                    f"{d['memory_gib']} GiB; {dts}",
                )
            )
        for lk in g["links"]:
            rows.append(
                (
                    f"GPU{lk['a']}-GPU{lk['b']}",
                    f"{lk['kind']}, peer access {'yes' if lk['peer_access'] else 'no'}",
                )
            )
    return widgets.HTML(_table(rows))


def ceilings_html(ceilings: list[Ceiling], device="cpu") -> str:
    """Measured ceilings next to torch.utils.benchmark's figure and the spec sheet (or estimate)."""
    head = (
        "<tr><th>benchmark</th><th>measured</th><th>spread</th><th>size</th>"
        "<th>torch.utils.benchmark</th><th>peak (spec or estimate)</th><th>share of peak</th></tr>"
    )
    body = []
    for c in ceilings:
        if math.isnan(c.value):
            body.append(f"<tr><td>{c.name}</td><td colspan=6>{html.escape(c.note)}</td></tr>")
            continue
        spec = peaks.spec_peak(device, c.dtype) if c.dtype else (None, "", "")
        peak = spec[0] * 1e3 if spec[0] else None
        check = f"{c.check:.4g} ({c.check_ratio:.2f}x)" if c.check else ""
        body.append(
            f"<tr><td>{c.name}</td><td>{c.value:.4g} {c.unit}</td><td>{c.spread:.0%}</td>"
            f"<td>{c.size}</td><td>{check}</td>"
            f"<td>{f'{peak:.4g} ({spec[1]})' if peak else ''}</td>"
            f"<td>{f'{c.value / peak:.0%}' if peak else ''}</td></tr>"
        )
    return f"{_busy_line(ceilings)}<table>{head}{''.join(body)}</table>"


def _busy_line(ceilings: list[Ceiling]) -> str:
    """The load the measurements met, said once above the table when other programs held cores."""
    load = load_line([c.other_cores for c in ceilings])
    return (
        (
            f"<p>{load[0].upper()}{load[1:]}: these ceilings are below what the device can do, and are "
            "cached apart from a quiet measurement.</p>"
        )
        if load
        else ""
    )


class BenchPanel:
    """A Measure button, a progress bar, and the ceilings table; `.run()` measures from code."""

    def __init__(self, device="cpu", quick: bool = False, save: bool = True):
        self.device, self.quick, self.save = device, quick, save
        self.ceilings: list[Ceiling] = []
        self.button = button("Measure ceilings", icon="tachometer")
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="0/0")
        self.status = widgets.Label("")
        self.table = widgets.HTML()
        self.button.on_click(lambda _: self.start())
        self.job = BackgroundJob(self.status, [self.button], "hardware-bench")
        self.widget = widgets.VBox([widgets.HBox([self.button, self.progress, self.status]), self.table])

    def _progress(self, i: int, n: int, label: str) -> None:
        self.progress.max, self.progress.value = n, i
        self.progress.description = f"{i}/{n}"
        self.status.value = "done" if label == "done" else f"measuring {label}..."

    def _measure(self) -> list[Ceiling]:
        self.ceilings = run_benchmarks(self.device, quick=self.quick, progress=self._progress)
        if self.save:
            path = peaks.save_ceilings(self.ceilings, self.device)
            self.status.value = f"done; cached for MFU in {path}"
        self.table.value = ceilings_html(self.ceilings, self.device)
        return self.ceilings

    def start(self) -> bool:
        """Measure on a thread (the button): the kernel stays responsive."""
        return self.job.start(self._measure)

    def wait(self, timeout: float | None = None) -> list[Ceiling]:
        """The measured ceilings once done (its error raised)."""
        return self.job.wait(timeout)

    def run(self) -> list[Ceiling]:
        """Measure and wait: the bar moves as each benchmark starts, then the table fills."""
        self.start()
        return self.wait()


def roofline_figure(ceilings: list[Ceiling], points: list[dict] = (), title: str = "") -> go.FigureWidget:
    """Log-log roofline: one roof per measured dtype (its compute ceiling, the copy bandwidth
    slope), and each model's training step at its intensity and achieved GFLOP/s."""
    bw = next((c.value for c in ceilings if c.name == "copy" and not math.isnan(c.value)), None)
    xs = [10 ** (k / 8) for k in range(-16, 33)]  # 0.01 .. 10,000 FLOP/byte
    fig = LiveFigure()
    with fig.batch_update():
        for c in ceilings:
            if c.kind != "compute" or math.isnan(c.value) or bw is None:
                continue
            fig.add_scatter(
                x=xs,
                y=[attainable(x, c.value, bw) for x in xs],
                mode="lines",
                name=f"{c.dtype} roof ({c.value:.4g} {c.unit})",
                line={"color": _COLORS.get(c.dtype), "width": 2},
            )
        for p in points:
            fig.add_scatter(
                x=[p["intensity"]],
                y=[p["gflops"]],
                mode="markers",
                hovertext=[f"{p['model']} {p['dtype']}"],
                marker={"size": 11, "color": _COLORS.get(p["dtype"], "black"), "symbol": "diamond"},
                name=f"{p['model']} step in {p['dtype']} ({p['gflops']:.3g} GFLOP/s)",
            )
        default = f"Roofline (memory roof: copy at {bw:.3g} GB/s)" if bw else "Roofline (no copy figure)"
        log_log(fig, title or default, "arithmetic intensity (FLOP per byte moved)", "GFLOP/s", 450)
    return fig


def mfu_figure(run_dir) -> go.FigureWidget:
    """MFU per step of one run, from its events: faint raw points under their rolling median (a
    share of the peak the summary names); a run that passed its peak says the peak is wrong."""
    steps = [r for r in read_events(run_dir) if r.get(EVENT) == STEP]
    s = read_summary(run_dir)
    points = [(r[STEP_NUMBER], 100 * r[MFU]) for r in steps if MFU in r]
    median = RollingMedian(25)
    fig = LiveFigure()
    with fig.batch_update():
        fig.add_scatter(
            x=[p[0] for p in points],
            y=[p[1] for p in points],
            mode="markers",
            opacity=0.25,
            marker={"size": 3},
            name="MFU per step",
        )
        fig.add_scatter(
            x=[p[0] for p in points],
            y=[median.push(p[1]) for p in points],
            mode="lines",
            name="median of 25 steps",
        )
        peak = (s.get("peak_tflops") or 0) * 1e3
        if s.get(MFU) is not None:
            when = f" ({s['peak_when']})" if s.get("peak_when") else ""
            title = (
                f"MFU per step: {mfu_text(s[MFU])} at the median step, against the "
                f"{s.get('mfu_basis', '?')} peak of {peak:.4g} GFLOP/s{when}"
            )
        else:
            title = f"MFU: {s.get('mfu_error', 'not measured')}"
        fig.update_layout(
            xaxis_title="step", yaxis_title="% of peak", height=320, yaxis={"rangemode": "tozero"}
        )
        set_title(fig, title)
    return fig


def chooser_figure(df, title: str = "") -> go.FigureWidget:
    """Estimated step time per GPU, green where the training state fits in memory, grey where not."""
    df = df.iloc[::-1]
    fig = LiveFigure()
    with fig.batch_update():
        fig.add_bar(
            x=df["step_ms"],
            y=df["gpu"],
            orientation="h",
            marker_color=["#2ca02c" if f else "#bbbbbb" for f in df["fits"]],
            customdata=list(zip(df["need_gib"], df["memory_gib"], df["bound"], df["dtype"])),
            hovertemplate="%{y}: %{x:.3g} ms/step, %{customdata[2]}-bound (%{customdata[3]})<br>"
            "needs %{customdata[0]:.1f} of %{customdata[1]} GB<extra></extra>",
        )
        fig.update_layout(
            title=title or "Estimated step time (green: fits in memory)",
            xaxis={"type": "log", "title": "ms per step (log)"},
            height=420,
        )
    return fig


class ChooserPanel:
    """Pick a batch-size multiple and a dtype; the chart re-estimates every GPU for the step cost."""

    def __init__(self, cost, dtype: str = "bf16", batch_scale: float = 1.0):
        self.cost = cost
        self.dtype = widgets.Dropdown(
            options=["fp32", "tf32", "bf16", "fp16", "fp8"], value=dtype, description="dtype"
        )
        self.scale = RefusingFloatLogSlider(
            value=batch_scale, base=2, min=0, max=12, step=1, description="batch x"
        )
        self.fig = chooser_figure(self.frame())
        self.dtype.observe(lambda _: self.redraw(), "value")
        self.scale.observe(lambda _: self.redraw(), "value")
        self.widget = widgets.VBox([widgets.HBox([self.dtype, self.scale]), self.fig])

    def frame(self):
        return choose(self.cost, self.dtype.value, self.scale.value)

    def redraw(self) -> None:
        df = self.frame().iloc[::-1]
        with self.fig.batch_update():
            bar = self.fig.data[0]
            bar.x, bar.y = list(df["step_ms"]), list(df["gpu"])
            bar.marker.color = ["#2ca02c" if f else "#bbbbbb" for f in df["fits"]]
            bar.customdata = list(zip(df["need_gib"], df["memory_gib"], df["bound"], df["dtype"]))
