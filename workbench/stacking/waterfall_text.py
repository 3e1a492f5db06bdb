"""A stacking study's table as text, the waterfall read top to bottom: each step, what it added,
samples/s, the ratio to the best config before it with its interval and pairs, the verdict, whether
it was kept, and the steps each side ran; a skipped or failed step with its reason; then what was
kept, their product, and the stacked config measured against the baseline.

    from workbench.stacking.waterfall_text import study_text
    print(study_text(records))   # records: the study's rows as dicts (each with `adds`)
"""

from __future__ import annotations

from ..events import SAMPLES_PER_S
from ..measure.ratios import speedup_text
from ..trials.changes import STACK_STEP
from .study import TOTAL
from .waterfall import is_kept, number

HEADER = ("step", "adds", "samples/s", "vs the best before", "verdict", "kept", "steps (this / before)")


def _adds(settings: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items()) or "-"


def _row(rec: dict, before: dict | None) -> tuple:
    sps = number(rec.get(SAMPLES_PER_S))
    kept = "yes" if is_kept(rec) else "no"
    if sps is None:
        return (rec[STACK_STEP], _adds(rec.get("adds", {})), "-", "-", rec["status"], "no", "-")
    steps = number(rec.get("steps"))
    ran = f"{steps:,.0f}" if steps is not None else "-"
    if before is None:
        return (rec[STACK_STEP], _adds(rec.get("adds", {})), f"{sps:,.0f}", "-", rec["status"], kept, ran)
    gain = speedup_text(
        number(rec.get("gain_vs_prev")), number(rec.get("gain_low")), number(rec.get("gain_high"))
    )
    rounds = number(rec.get("rounds"))
    prev = number(before.get("steps"))
    return (
        rec[STACK_STEP],
        _adds(rec.get("adds", {})),
        f"{sps:,.0f}",
        f"{gain} over {rounds:.0f} pairs" if rounds else gain,
        rec["status"],
        kept if rec[STACK_STEP] != TOTAL else "-",
        f"{ran} / {prev:,.0f}" if prev is not None else ran,
    )


def study_text(records: list[dict]) -> str:
    """The table, then one line per step that has a reason or a note, then the total."""
    rows, before = [HEADER], None
    for rec in records:
        rows.append(_row(rec, before))
        if number(rec.get(SAMPLES_PER_S)) is not None and is_kept(rec):
            before = rec
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    for rec in records:
        said = [rec.get("reason") or "", rec.get("note") or ""]
        said = "; ".join(s for s in said if s)
        if said:
            lines.append(f"{rec[STACK_STEP]}: {rec['status']}: {said}")
    kept = [r for r in records if is_kept(r) and r["status"] != "baseline" and r[STACK_STEP] != TOTAL]
    product = 1.0
    for r in kept:
        product *= number(r["gain_vs_prev"])
    names = ", ".join(r[STACK_STEP] for r in kept) or "nothing: the baseline"
    lines.append(f"kept: {names}; their product {product:.2f}x the baseline")
    total = next((r for r in records if r[STACK_STEP] == TOTAL), None)
    if total is not None and number(total.get("gain_vs_prev")) is not None:
        gain = speedup_text(
            number(total["gain_vs_prev"]), number(total.get("gain_low")), number(total.get("gain_high"))
        )
        lines.append(f"measured side by side against the baseline: {gain}, {total['status']}")
    return "\n".join(lines)
