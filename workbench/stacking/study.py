"""The stacking study: from a baseline config, apply changes one at a time, cumulatively, run every
step for real (workbench.distributed.launch.run), and tabulate what each step added.

    from workbench.stacking.study import run_study
    df = run_study(RunConfig.smoke(), ["bf16", "channels_last", "workers", "pin_memory", "ddp"])

A change that cannot run on this hardware stays in the table as "skipped" with the reason; a change
that slows the run down is marked "slower" (and still stacked: the list is the user's choice).
"""
from __future__ import annotations

from typing import Callable

from ..distributed.launch import run
from ..events import read_events
from ..measure.verdict import MIN_EFFECT, verdict
from .plan import PlannedStep, plan


COLUMNS = ["step", "status", "samples_per_s", "gain_vs_prev", "gain_vs_baseline", "peak_mem_gib",
           "final_loss", "eval_accuracy", "step_time_ms", "reason", "note", "run_dir"]


def peak_memory_gib(run_dir) -> float | None:
    """The highest memory reading of rank 0 (GPU allocator peak on a GPU, else process RSS)."""
    peaks = [r.get("mem_peak_gib", r.get("rss_gib")) for r in read_events(run_dir)
             if r.get("rank") == 0 and ("mem_peak_gib" in r or "rss_gib" in r)]
    peaks = [p for p in peaks if isinstance(p, (int, float))]
    return max(peaks) if peaks else None


def step_row(planned: PlannedStep, summary: dict | None, prev: float | None, base: float | None,
             min_effect: float = MIN_EFFECT) -> dict:
    """One table row from a run's summary (None when the step was skipped)."""
    row = {"step": planned.change.label, "status": "skipped", "samples_per_s": None,
           "gain_vs_prev": None, "gain_vs_baseline": None, "peak_mem_gib": None, "final_loss": None,
           "eval_accuracy": None, "step_time_ms": None, "reason": planned.reason or "",
           "note": planned.note, "run_dir": None}
    if summary is None:
        return row
    row.update(run_dir=summary.get("run_dir"), final_loss=summary.get("final_loss"),
               eval_accuracy=summary.get("eval_accuracy"), step_time_ms=summary.get("step_time_ms_median"),
               samples_per_s=summary.get("samples_per_s"))
    if summary.get("run_dir"):
        row["peak_mem_gib"] = peak_memory_gib(summary["run_dir"])
    if summary.get("status") != "completed" or not row["samples_per_s"]:
        row.update(status="failed", samples_per_s=None,
                   reason=f"{summary.get('error_type', '')}: {summary.get('message', summary.get('status'))}")
        return row
    sps = row["samples_per_s"]
    if base is None:
        row.update(status="baseline", gain_vs_prev=1.0, gain_vs_baseline=1.0)
    else:
        row.update(gain_vs_prev=round(sps / prev, 3), gain_vs_baseline=round(sps / base, 3))
        row["status"] = verdict(row["gain_vs_prev"], min_effect=min_effect)
    return row


def run_study(baseline: RunConfig, changes, *, on_step: Callable[[dict], None] | None = None,
              timeout_s: float = 900, min_effect: float = MIN_EFFECT,
              stop: Callable[[], bool] | None = None):
    """Run the baseline and every applicable change, cumulatively; returns a pandas DataFrame.

    `on_step(row)` is called as each step finishes (the UI redraws from it); `stop()` returning True
    ends the study before the next run.
    """
    import pandas as pd

    rows, prev, base = [], None, None
    for i, planned in enumerate(plan(baseline, changes)):
        if stop is not None and stop():
            break
        summary = None
        if planned.reason is None:
            label = f"stack{i}-{planned.change.key}"[:60]
            summary = run(planned.config.replace(**{"run.label": label}), timeout_s=timeout_s)
        row = step_row(planned, summary, prev, base, min_effect)
        if row["samples_per_s"] is not None:
            prev = row["samples_per_s"]
            base = base if base is not None else prev
        rows.append(row)
        if on_step is not None:
            on_step(row)
        if base is None:  # nothing to compare with: stop rather than call a later step the baseline
            row["reason"] = "the baseline failed, so the study stopped: " + row["reason"]
            break
    return pd.DataFrame(rows, columns=COLUMNS)
