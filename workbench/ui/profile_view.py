"""Widgets of the profiling lab: where a config's step time and memory go, in one screen. A stacked
bar per rank (one colour per phase), the verdict and what to measure next, the top operators, the memory
beside the chooser's estimate; buttons that measure the checkpointing trade and the optimizer
implementations. Every measurement runs on a BackgroundJob (the profile itself in a worker).

    lab = ProfileLab(cfg); lab          # shows the controls; lab.start() profiles, lab.wait()
    lab.trade(); lab.wait()             # checkpointing on vs off: memory saved, time paid
    lab.optimizers(); lab.wait()        # for-loop / foreach / fused optimizer steps
"""

from __future__ import annotations

import html

import ipywidgets as widgets
import plotly.graph_objects as go

from .table import html_table
from ..config import RunConfig
from ..profile.breakdown_text import LABELS
from ..profile.checkpoint import checkpoint_trade
from ..profile.memory_breakdown import PARTS, mib
from ..profile.optimizers import IMPLS, compare_optimizers
from ..profile.profiled_run import PROFILE_STEPS, profile
from ..train.profiling import PHASES
from .charts import AXIS_TITLE_STANDOFF, LEGEND_BELOW, set_title
from .figure import LiveFigure
from .job import BackgroundJob, show
from .sizing import button

COLORS = {
    "data": "#ff7f0e",
    "copy": "#ffbb78",
    "forward": "#1f77b4",
    "backward": "#aec7e8",
    "all_reduce": "#d62728",
    "optimizer": "#2ca02c",
    "rest": "#7f7f7f",
}
PART_COLORS = {
    "parameters": "#1f77b4",
    "gradients": "#aec7e8",
    "optimizer_state": "#2ca02c",
    "activations": "#ff7f0e",
}


def phase_bars(fig: go.FigureWidget, b) -> None:
    """One horizontal bar per rank, stacked by phase (ms, the median over the profiled steps)."""
    ranks = [f"rank {r.rank}" for r in b.ranks]
    with fig.batch_update():
        for trace, phase in zip(fig.data, PHASES):
            trace.y = ranks
            trace.x = [r.phases_ms[phase] for r in b.ranks]
        set_title(
            fig,
            f"where a step's {b.step_ms:.1f} ms go (median of {len(b.ranks[0].steps)} "
            f"profiled steps): bound by {b.verdict.bound_by}",
        )


def memory_bars(fig: go.FigureWidget, m) -> None:
    """Measured and estimated bytes, stacked by part (MiB)."""
    cols = ["measured", "estimate (chooser)"] if m.estimate else ["measured"]
    with fig.batch_update():
        for trace, part in zip(fig.data, PARTS):
            trace.x = cols
            trace.y = [m.bytes[part] / 2**20] + ([m.estimate[part] / 2**20] if m.estimate else [])
        set_title(fig, f"training state: {mib(m.total)} measured")


def ops_table(b, top: int = 12) -> str:
    ops = b.ranks[0].top_ops[:top]
    device = bool(ops) and "device_ms_per_step" in ops[0]
    ms = "device ms a step" if device else "own ms a step"
    rows = [
        {
            "operator": o["name"],
            "phase": o["phase"],
            ms: o["device_ms_per_step" if device else "self_ms_per_step"],
            "calls a step": o["calls_per_step"],
            "input shapes": o["input_shapes"],
        }
        for o in ops
    ]
    return html_table(
        rows,
        ["operator", "phase", ms, "calls a step", "input shapes"],
        above="Top operators per step (rank 0)",
        where="the operators table",
    )


def verdict_html(b) -> str:
    lines = b.verdict.text().splitlines()
    plain = b.unprofiled_step_ms
    cost = (
        (f" (unprofiled steps: {plain:.1f} ms; profiling made a step {b.step_ms / plain:.2f}x as long)")
        if plain
        else ""
    )
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in b.notes + b.memory.notes)
    return (
        f"<h4>{html.escape(lines[0])}</h4><p>{'<br>'.join(html.escape(x) for x in lines[1:])}</p>"
        f"<p>phases add up to each profiled step's measured time within {b.sum_error():.1%}{cost}; "
        f"trace: <code>{html.escape(str(b.ranks[0].trace))}</code> (open in ui.perfetto.dev)</p>"
        + (f"<ul>{notes}</ul>" if notes else "")
    )


class ProfileLab:
    """Profile `cfg`; `.breakdown`, `.trade_result` and `.optimizer_result` hold what was measured."""

    def __init__(
        self,
        cfg: RunConfig,
        profile_steps: int = PROFILE_STEPS,
        rounds: int | None = None,
        checkpoint: list[str] | None = None,
    ):
        """`rounds`: pairs of slices of the checkpointing A/B test (default: the fewest that carry
        an interval); `checkpoint`: the modules it checkpoints (default: the model's suggestion)."""
        self.cfg, self.profile_steps, self.checkpoint = cfg, profile_steps, checkpoint
        self.rounds = rounds
        self.breakdown = self.trade_result = self.optimizer_result = None
        self.status = widgets.HTML("not started")
        self.profile_button = button("Profile", button_style="primary")
        self.trade_button = button("Checkpointing trade")
        self.optim_button = button("Optimizer implementations")
        self.profile_button.on_click(lambda _: self.start())
        self.trade_button.on_click(lambda _: self.trade())
        self.optim_button.on_click(lambda _: self.optimizers())
        buttons = [self.profile_button, self.trade_button, self.optim_button]
        self.job = BackgroundJob(self.status, buttons, "profile")
        self.phases = LiveFigure(
            [
                go.Bar(
                    name=LABELS[p],
                    orientation="h",
                    x=[],
                    y=[],
                    marker_color=COLORS[p],
                    hovertemplate=f"{LABELS[p]}: %{{x:.2f}} ms<extra></extra>",
                )
                for p in PHASES
            ],
            layout=dict(
                barmode="stack",
                height=260,
                xaxis_title="ms per step",
                xaxis_title_standoff=AXIS_TITLE_STANDOFF,
                title="not profiled yet",
                margin=dict(t=40, b=40, l=70, r=10),
                legend=LEGEND_BELOW,
            ),
        )
        self.memory = LiveFigure(
            [go.Bar(name=p.replace("_", " "), x=[], y=[], marker_color=PART_COLORS[p]) for p in PARTS],
            layout=dict(
                barmode="stack",
                height=300,
                yaxis_title="MiB",
                title="memory",
                margin=dict(t=40, b=40, l=60, r=10),
            ),
        )
        self.verdict = widgets.HTML()
        self.ops = widgets.HTML()
        self.results = widgets.HTML()
        self.widget = widgets.VBox(
            [
                widgets.HBox([*buttons, self.status]),
                self.phases,
                self.verdict,
                self.memory,
                self.ops,  # full width under the chart: beside it, its columns wrapped letter by letter
                self.results,
            ]
        )

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)

    @property
    def error(self):
        return self.job.error

    def wait(self, timeout: float | None = None):
        return self.job.wait(timeout)

    def start(self, cfg: RunConfig | None = None) -> bool:
        """Profile `cfg` (or the lab's config) in a worker; the charts fill in when it is done."""
        self.cfg = cfg or self.cfg
        return self.job.start(self._profile)

    def _profile(self):
        show(self.status, "profiling: a short run in a worker ...")
        b = profile(self.cfg, self.profile_steps)
        self.breakdown = b
        phase_bars(self.phases, b)
        memory_bars(self.memory, b.memory)
        self.verdict.value = verdict_html(b)
        self.ops.value = ops_table(b)
        show(self.status, f"done: bound by {b.verdict.bound_by}")
        return b

    def trade(self) -> bool:
        """Checkpointing on vs off: two profiles and an A/B test of the two configs."""

        def work():
            def progress(s):
                show(self.status, f"A/B pair {s.round + 1}: {s.label} {s.rate:,.0f} samples/s")

            show(self.status, "checkpointing trade: profiling with and without ...")
            t = checkpoint_trade(
                self.cfg, self.checkpoint, rounds=self.rounds, on_slice=progress, baseline=self.breakdown
            )  # reused when it profiled this config
            self.trade_result = t
            self.results.value = f"<pre>{html.escape(t.text())}</pre>"
            show(self.status, "done: checkpointing trade")
            return t

        return self.job.start(work)

    def optimizers(self) -> bool:
        """The optimizer step as for-loop, foreach and fused, interleaved in this process."""

        def work():
            show(self.status, "timing optimizer implementations ...")
            c = compare_optimizers(self.cfg, IMPLS, rounds=max(10, self.rounds or 10))
            self.optimizer_result = c
            self.results.value = f"<pre>{html.escape(c.text())}</pre>"
            show(self.status, "done: optimizer implementations")
            return c

        return self.job.start(work)
