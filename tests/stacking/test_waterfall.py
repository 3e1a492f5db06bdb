"""The waterfall's data: each step from the level before, adding up to the total."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.stacking.waterfall import waterfall_records


def test_waterfall_steps_add_up_to_the_total():
    df = pd.DataFrame(
        [
            {
                "step": "baseline",
                "status": "baseline",
                "samples_per_s": 100.0,
                "gain_vs_prev": 1.0,
                "gain_vs_baseline": 1.0,
                "reason": "",
            },
            {
                "step": "+ bf16",
                "status": "faster",
                "samples_per_s": 150.0,
                "gain_vs_prev": 1.5,
                "gain_vs_baseline": 1.5,
                "reason": "",
            },
            {
                "step": "+ pinned memory",
                "status": "skipped",
                "samples_per_s": None,
                "gain_vs_prev": None,
                "gain_vs_baseline": None,
                "reason": "pin_memory needs a GPU",
            },
            {
                "step": "+ 2 loader workers",
                "status": "slower",
                "samples_per_s": 120.0,
                "gain_vs_prev": 0.8,
                "gain_vs_baseline": 1.2,
                "reason": "",
            },
        ]
    )
    w = waterfall_records(df)
    assert w["measure"] == ["absolute", "relative", "relative", "relative", "total"]
    assert w["y"][:4] == pytest.approx([100.0, 50.0, 0.0, -30.0]) and w["y"][4] == 120.0
    assert sum(w["y"][:4]) == pytest.approx(w["y"][4])
    assert "pin_memory needs a GPU" in w["text"][2] and "slower" in w["text"][3]
    assert w["base"] == pytest.approx([0.0, 100.0, 150.0, 150.0, 0.0])  # from the level before
    assert w["status"] == ["baseline", "faster", "skipped", "slower", "baseline"]
