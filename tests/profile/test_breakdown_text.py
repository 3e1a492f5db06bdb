"""The profile's text: a predicted peak it prints is a claim, which fails when the prediction
misses by more than its tolerance, and a peak not predicted says why instead."""

from __future__ import annotations

from workbench.measure import claims
from workbench.profile.breakdown_text import per_rank_lines

MIB = 2**20
PARTS = {"parameters": MIB, "gradients": MIB, "optimizer": 2 * MIB, "activations": 8 * MIB}


def per_rank(predicted_peak, measured_peak, not_predicted=()):
    return {
        "strategy": "one process",
        "predicted": [{**PARTS, "peak": predicted_peak}],
        "measured": [{"rank": 0, **PARTS, "peak": measured_peak}],
        "not_measured": [],
        "not_predicted": list(not_predicted),
    }


def test_a_printed_peak_prediction_is_checked_and_a_miss_fails():
    claims.clear()
    per_rank_lines(per_rank(600 * MIB, 650 * MIB))
    assert [c.holds for c in claims.made()] == [True]
    claims.clear()
    per_rank_lines(per_rank(600 * MIB, 787 * MIB))  # 24 % under: a planted miss
    (miss,) = claims.made()
    assert not miss.holds and "outside its 15%" in miss.checked
    claims.clear()


def test_a_peak_not_predicted_claims_nothing_and_says_why():
    claims.clear()
    lines = per_rank_lines(per_rank(None, 650 * MIB, ["peak (the C library's malloc keeps ...)"]))
    assert claims.made() == [] and "not predicted: peak (the C library's malloc" in lines[-1]
