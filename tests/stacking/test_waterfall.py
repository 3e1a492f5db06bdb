"""The waterfall's data: each step from the level of what was kept before it, the kept steps adding
up to the total, the stacked config's measurement beside it."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.stacking.study import TOTAL
from workbench.stacking.waterfall import waterfall_records


def _row(step, status, sps, gain, kept, reason="", low=None, high=None):
    return {
        "step": step,
        "status": status,
        "kept": kept,
        "samples_per_s": sps,
        "gain_vs_prev": gain,
        "gain_low": low,
        "gain_high": high,
        "reason": reason,
    }


def test_the_kept_steps_add_up_to_the_total_and_a_dropped_one_leaves_the_level():
    df = pd.DataFrame(
        [
            _row("baseline", "baseline", 100.0, 1.0, True),
            _row("+ bf16", "faster", 150.0, 1.5, True, low=1.4, high=1.6),
            _row("+ pinned memory", "skipped", None, None, False, "pin_memory needs a GPU"),
            _row("+ 2 loader workers", "slower", 120.0, 0.8, False, low=0.7, high=0.9),
            _row(TOTAL, "faster", 145.0, 1.45, None, low=1.3, high=1.6),
        ]
    )
    w = waterfall_records(df)
    assert w["x"][-2:] == ["total (kept)", "measured"]
    assert w["measure"] == ["absolute", "relative", "relative", "relative", "total", "absolute"]
    assert w["y"] == pytest.approx([100.0, 50.0, 0.0, -30.0, 150.0, 145.0])
    kept_bars = [y for y, s in zip(w["y"][:4], w["status"]) if s in ("baseline", "faster")]
    assert sum(kept_bars) == pytest.approx(w["y"][4])  # the total is the kept steps' product
    assert w["base"] == pytest.approx([0.0, 100.0, 150.0, 150.0, 0.0, 0.0])  # a dropped step: from the level
    assert "pin_memory needs a GPU" in w["text"][2]
    assert "slower" in w["text"][3] and "not kept" in w["text"][3]
    assert "x1.50 vs baseline (the kept steps' product)" in w["text"][4]
    assert "1.45x [1.30, 1.60] vs baseline, measured side by side" in w["text"][5]
    assert w["status"] == ["baseline", "faster", "skipped", "slower", "baseline", "faster"]
