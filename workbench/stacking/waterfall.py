"""What a waterfall chart of a study's samples/s needs, from its table: labels, measures, deltas,
where each bar starts, each bar's verdict and hover text (plain data; workbench.ui.stacking draws
it, coloured by verdict: a step that went up within noise is not drawn as a gain).

The bars are drawn from the ratios each step was measured at, not from rates of different trials:
the baseline's samples/s, then each measured step's change from the level of what was kept before
it. A kept step raises (or lowers) the level; a dropped one shows what it did and leaves the level
where it was, so the kept steps' bars add up to the total, which is the baseline times their product.
The stacked config measured against the baseline, when the study ran it, stands beside the total.
"""

from __future__ import annotations

from ..events import SAMPLES_PER_S
from ..measure.ratios import speedup_text
from ..trials.changes import STACK_STEP


def number(value) -> float | None:
    """A figure from a table cell; None for a missing one (pandas turns None into NaN)."""
    return None if value is None or value != value else float(value)


def is_kept(row: dict) -> bool:
    kept = row.get("kept")
    if kept is None or kept != kept:  # a table without the column: what its verdicts would keep
        return row["status"] in ("baseline", "faster")
    return bool(kept)


def waterfall_records(df) -> dict:
    """What a waterfall chart of samples/s needs: labels, measures, deltas and hover text (see the
    module). `base` is where each bar starts, `status` its verdict."""
    from .study import TOTAL

    x, measure, y, text, base, status = [], [], [], [], [], []
    level = start = None
    measured_total = None
    for row in df.to_dict("records"):
        if row[STACK_STEP] == TOTAL:
            measured_total = row
            continue
        ratio = number(row.get("gain_vs_prev"))
        x.append(row[STACK_STEP])
        status.append(row["status"])
        if row["status"] == "baseline":
            start = level = number(row[SAMPLES_PER_S])
            measure.append("absolute")
            y.append(level)
            base.append(0.0)
            text.append(f"{level:,.0f}/s" if level is not None else "not measured")
            continue
        measure.append("relative")
        base.append(level if level is not None else 0.0)
        if ratio is None or level is None:
            y.append(0.0)
            text.append(f"{row['status']}: {row['reason']}"[:80])
            continue
        y.append(level * (ratio - 1))
        gain = speedup_text(ratio, number(row.get("gain_low")), number(row.get("gain_high")))
        rounds = number(row.get("rounds"))
        over = f", {rounds:.0f} pairs" if rounds else ""
        text.append(f"{gain} ({row['status']}{over}{', kept' if is_kept(row) else ', not kept'})")
        if is_kept(row):
            level *= ratio
    if start is not None and len(x) > 1:
        x.append("total (kept)")
        measure.append("total")
        y.append(level)
        text.append(f"x{level / start:.2f} vs baseline (the kept steps' product)")
        base.append(0.0)
        status.append("baseline")
    total = measured_total or {}
    if start is not None and number(total.get("gain_vs_prev")):
        r = number(total["gain_vs_prev"])
        x.append("measured")
        measure.append("absolute")
        y.append(start * r)
        gain = speedup_text(
            r, number(measured_total.get("gain_low")), number(measured_total.get("gain_high"))
        )
        text.append(f"{gain} vs baseline, measured side by side")
        base.append(0.0)
        status.append(total["status"])
    return {"x": x, "measure": measure, "y": y, "text": text, "base": base, "status": status}
