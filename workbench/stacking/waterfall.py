"""What a waterfall chart of a study's samples/s needs, from its table: labels, measures, deltas,
where each bar starts, each bar's verdict and hover text (plain data; workbench.ui.stacking draws
it, coloured by verdict: a step that went up within noise is not drawn as a gain).
"""

from __future__ import annotations

from ..events import SAMPLES_PER_S
from ..measure.ratios import speedup_text
from ..trials.changes import STACK_STEP


def number(value) -> float | None:
    """A figure from a table cell; None for a missing one (pandas turns None into NaN)."""
    return None if value is None or value != value else float(value)


def waterfall_records(df) -> dict:
    """What a waterfall chart of samples/s needs: labels, measures, deltas and hover text.

    The baseline is an absolute bar, each step a relative one (0 for a skipped or failed step, with
    the reason as its text), and the last bar the total reached. `base` is where each bar starts
    (the level before a step), `status` its verdict."""
    x, measure, y, text, base, status = [], [], [], [], [], []
    prev = None
    for row in df.to_dict("records"):
        sps = number(row[SAMPLES_PER_S])
        x.append(row[STACK_STEP])
        status.append(row["status"])
        base.append(0.0 if row["status"] == "baseline" or prev is None else prev)
        if row["status"] == "baseline":
            measure.append("absolute")
            y.append(sps)
            text.append(f"{sps:,.0f}/s")
        elif sps is None:
            measure.append("relative")
            y.append(0.0)
            text.append(f"{row['status']}: {row['reason']}"[:80])
        else:
            measure.append("relative")
            y.append(sps - prev)
            gain = speedup_text(
                row["gain_vs_prev"], number(row.get("gain_low")), number(row.get("gain_high"))
            )
            rounds = number(row.get("rounds"))
            over = f", {rounds:.0f} rounds" if rounds else ""
            text.append(f"{gain} ({row['status']}{over})")
        if sps is not None:
            prev = sps
    done = [r for r in df.to_dict("records") if number(r[SAMPLES_PER_S]) is not None]
    if done and done[0]["status"] == "baseline":
        x.append("total")
        measure.append("total")
        y.append(done[-1][SAMPLES_PER_S])
        text.append(f"x{done[-1]['gain_vs_baseline']:.2f} vs baseline")
        base.append(0.0)
        status.append("baseline")
    return {"x": x, "measure": measure, "y": y, "text": text, "base": base, "status": status}
