"""What a waterfall chart of a study's samples/s needs, from its table: labels, measures, deltas and
hover text (plain data; workbench.ui.stacking draws it).
"""
from __future__ import annotations


def number(value) -> float | None:
    """A figure from a table cell; None for a missing one (pandas turns None into NaN)."""
    return None if value is None or value != value else float(value)


def waterfall_records(df) -> dict:
    """What a waterfall chart of samples/s needs: labels, measures, deltas and hover text.

    The baseline is an absolute bar, each step a relative one (0 for a skipped or failed step, with
    the reason as its text), and the last bar the total reached."""
    x, measure, y, text = [], [], [], []
    prev = None
    for row in df.to_dict("records"):
        sps = number(row["samples_per_s"])
        x.append(row["step"])
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
            text.append(f"x{row['gain_vs_prev']:.2f} ({row['status']})")
        if sps is not None:
            prev = sps
    done = [r for r in df.to_dict("records") if number(r["samples_per_s"]) is not None]
    if done and done[0]["status"] == "baseline":
        x.append("total")
        measure.append("total")
        y.append(done[-1]["samples_per_s"])
        text.append(f"x{done[-1]['gain_vs_baseline']:.2f} vs baseline")
    return {"x": x, "measure": measure, "y": y, "text": text}
