"""A stacking study's table as text, the waterfall read top to bottom: each step, what it added,
samples/s, the ratio to the step before with its interval and rounds, the verdict, and the steps
each side ran (under a time budget they differ); a skipped or failed step with its reason, and
the total against the baseline.

    from workbench.stacking.waterfall_text import study_text
    print(study_text(records))   # records: the study's rows as dicts (each with `adds`)
"""

from __future__ import annotations

from ..events import SAMPLES_PER_S
from ..measure.ratios import speedup_text
from ..trials.changes import STACK_STEP
from .waterfall import number

HEADER = ("step", "adds", "samples/s", "vs the step before", "verdict", "steps (this / before)")


def _adds(settings: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items()) or "-"


def _row(rec: dict, before: dict | None) -> tuple:
    sps = number(rec.get(SAMPLES_PER_S))
    if sps is None:
        return (rec[STACK_STEP], _adds(rec.get("adds", {})), "-", "-", rec["status"], "-")
    steps = number(rec.get("steps"))
    ran = f"{steps:,.0f}" if steps is not None else "-"
    if before is None:
        return (rec[STACK_STEP], _adds(rec.get("adds", {})), f"{sps:,.0f}", "-", rec["status"], ran)
    gain = speedup_text(
        number(rec.get("gain_vs_prev")), number(rec.get("gain_low")), number(rec.get("gain_high"))
    )
    rounds = number(rec.get("rounds"))
    prev = number(before.get("steps"))
    return (
        rec[STACK_STEP],
        _adds(rec.get("adds", {})),
        f"{sps:,.0f}",
        f"{gain} over {rounds:.0f} rounds" if rounds else gain,
        rec["status"],
        f"{ran} / {prev:,.0f}" if prev is not None else ran,
    )


def study_text(records: list[dict]) -> str:
    """The table, then one line per step that has a reason or a note, then the total."""
    rows, before = [HEADER], None
    for rec in records:
        rows.append(_row(rec, before))
        if number(rec.get(SAMPLES_PER_S)) is not None:
            before = rec
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    for rec in records:
        said = [rec.get("reason") or "", rec.get("note") or ""]
        said = "; ".join(s for s in said if s)
        if said:
            lines.append(f"{rec[STACK_STEP]}: {rec['status']}: {said}")
    done = [r for r in records if number(r.get(SAMPLES_PER_S)) is not None]
    if len(done) > 1 and done[0]["status"] == "baseline":
        lines.append(
            f"total: {done[-1][SAMPLES_PER_S]:,.0f} samples/s, "
            f"{number(done[-1]['gain_vs_baseline']):.2f}x the baseline's "
            f"{done[0][SAMPLES_PER_S]:,.0f} (the median of the rounds' paired ratios)"
        )
    return "\n".join(lines)
