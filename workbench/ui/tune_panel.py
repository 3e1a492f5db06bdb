"""The tune panel (notebook 08): a budget, Tune and Stop, a table that gains a row as each setting
is decided (kept, dropped, undecided or not measured, the ratio with its interval, the pairs used
and dropped and under which load, the loss check, why), and the
recommended config with the export of it.

    panel = TunePanel(RunConfig.default().with_model("mynet.py:build"), budget_min=3); display(panel)
    panel.run(wait=True); panel.report.text(); panel.export("tuned/")
"""

from __future__ import annotations

import html
import threading

import ipywidgets as w

from ..config import ConfigError, RunConfig
from ..trials.engine import SLICE_S
from ..tune.search import Decision
from .table import html_table
from .job import BackgroundJob, show
from .sizing import FULL_LABEL, button

COLUMNS = (
    "setting",
    "decision",
    "ratio [98 % interval: what decided]",
    "pairs",
    "dropped",
    "conditions",
    "loss check",
    "what decided",
    "why then",
)


def decision_row(d: Decision) -> list[str]:
    ratio = "" if d.ratio is None else d.interval_text().rsplit(" over ", 1)[0]
    return [
        d.setting,
        d.status,
        ratio,
        str(d.rounds or ""),
        str(d.dropped_pairs or ""),
        d.conditions,
        d.loss_check or "",
        d.outcome,
        d.why,
    ]


def decisions_table(decisions: list[Decision]) -> str:
    return html_table(
        [dict(zip(COLUMNS, decision_row(d))) for d in decisions], list(COLUMNS), where="the tune's decisions"
    )


class TunePanel:
    def __init__(
        self,
        cfg: RunConfig,
        budget_min: float = 3.0,
        slice_s: float = SLICE_S,
        memory_gib: float | None = None,
    ):
        self.cfg, self.memory_gib = cfg, memory_gib  # None: what the pre-launch check says is free
        self.budget = w.FloatText(
            budget_min,
            description="budget (min)",
            style=FULL_LABEL,
            tooltip="minutes for the whole tune, the profiling run included",
        )
        self.slice_s = w.FloatText(
            slice_s,
            description="slice (s)",
            style=FULL_LABEL,
            tooltip="seconds of steps a slice gets, both sides alike",
        )
        self.tune_button = button("Tune", button_style="primary")
        self.stop_button = button("Stop", button_style="warning")
        self.status = w.HTML("")
        self.table = w.HTML("")
        self.result = w.HTML("")
        self.decisions: list[Decision] = []
        self.report = None
        self._stop = threading.Event()
        self._runs = 0
        self.job = BackgroundJob(self.status, [self.tune_button], "workbench-tune", on_end=self._ended)
        self.tune_button.on_click(lambda _: self.run())
        self.stop_button.on_click(lambda _: self.stop())
        self.widget = w.VBox(
            [
                w.HBox([self.budget, self.slice_s, self.tune_button, self.stop_button]),
                self.status,
                self.table,
                self.result,
            ]
        )

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def run(self, wait: bool = False):
        """Start the tune on a thread (the kernel stays free); with `wait`, return its report."""
        from ..tune.tuner import tune

        budget_s, slice_s = 60 * float(self.budget.value), float(self.slice_s.value)
        if not budget_s > 0 or not 0.01 <= slice_s <= 60:  # refused here, before any run
            show(
                self.status,
                f"error: the budget must be > 0 min and a slice 0.01-60 s, got "
                f"{self.budget.value} min and {self.slice_s.value} s",
                error=True,
            )
            return None
        self.decisions, self.report, self._runs = [], None, 0
        self._stop.clear()
        self.table.value = self.result.value = ""
        show(self.status, f"tuning for up to {budget_s / 60:g} min: profiling the baseline first")
        started = self.job.start(
            lambda: tune(
                self.cfg,
                budget_s=budget_s,
                slice_s=slice_s,
                memory_budget_gib=self.memory_gib,
                on_decision=self._decided,
                on_slice=self._ran,
                stop=self._stop.is_set,
            )
        )
        return self.job.wait() if (wait and started) else None

    def stop(self) -> None:
        """Stop after the slice going now; the settings decided so far stay in the report."""
        self._stop.set()
        show(self.status, "stopping after the current slice")

    def _ran(self, s) -> None:
        self._runs += 1
        show(self.status, f"slice {self._runs}: {s.label} {s.rate:,.0f} samples/s")

    def _decided(self, d: Decision) -> None:
        self.decisions.append(d)
        self.table.value = decisions_table(self.decisions)

    def _ended(self, job: BackgroundJob) -> None:
        if job.error is not None:
            return
        self.report = job.result
        self.table.value = decisions_table(self.report.decisions)
        kept = ", ".join(f"{k}={v}" for k, v in self.report.settings.items()) or "nothing: the baseline stays"
        show(self.status, f"done in {self.report.spent_s:.0f} s; {self.report.bound_by_note}")
        self.result.value = (
            f"<b>recommended:</b> {html.escape(kept)}<br><small>"
            f"{html.escape(self.report.memory_note)}<br>not tried: "
            + html.escape("; ".join(f"{k} ({v})" for k, v in self.report.not_tried.items()))
            + "</small>"
        )

    def export(self, to_dir):
        """The recommended config's train.py, torchrun commands and job.slurm in `to_dir`."""
        if self.report is None:
            raise ConfigError("nothing to export yet: run the tune first (panel.run(wait=True))")
        from ..export import export

        return export(self.report.config, to_dir, overwrite=True)
