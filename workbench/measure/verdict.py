"""The one verdict rule: is a variant faster than its reference, slower, or within noise?

    verdict(1.31)                      # 'faster'
    verdict(1.04)                      # 'within noise': below the minimum effect
    verdict(1.12, interval=(0.97, 1.3))  # 'within noise': the interval holds 1

A ratio is the variant's speed over the reference's (above 1: faster). It is called faster or
slower only when it differs from 1 by more than `min_effect` and, when an interval is known, the
whole interval lies on that side of 1. A measurement without an interval (too few pairs) is
"undecided" wherever it is shown (workbench.measure.ratios), never "within noise".

A variant that lost accuracy is not simply faster: `weighed` adds what was lost to the verdict
when accuracy fell by more than ACCURACY_TOLERANCE, and `is_clean_gain` tells a chart or table
whether it may paint the row as a gain.

    weighed("faster", 0.995, 0.273)    # 'faster, but accuracy 0.995 -> 0.273'
"""

from __future__ import annotations

FASTER, SLOWER, WITHIN_NOISE = "faster", "slower", "within noise"
UNDECIDED = "undecided"  # too few pairs for an interval: no verdict, and never "within noise"
MIN_EFFECT = 0.05  # smaller gains are not worth a setting, whatever the interval says


def verdict(
    ratio: float | None, interval: tuple[float, float] | None = None, min_effect: float = MIN_EFFECT
) -> str | None:
    """'faster', 'slower' or 'within noise' for a speed ratio; None when nothing was measured."""
    if ratio is None or ratio != ratio:
        return None
    low, high = interval if interval is not None else (ratio, ratio)
    if ratio > 1 + min_effect and low > 1:
        return FASTER
    if ratio < 1 / (1 + min_effect) and high < 1:
        return SLOWER
    return WITHIN_NOISE


ACCURACY_TOLERANCE = 0.01  # accuracy (a fraction) a variant may lose before its verdict says so
BUT = ", but "


def weighed(
    verdict: str | None, before: float | None, after: float | None, tolerance: float = ACCURACY_TOLERANCE
) -> str | None:
    """`verdict` with the accuracy it cost when that fell by more than `tolerance` (absolute)."""
    if verdict is None or before is None or after is None or before != before or after != after:
        return verdict
    if before - after <= tolerance:
        return verdict
    return f"{verdict}{BUT}accuracy {before:.3f} -> {after:.3f}"


def is_clean_gain(status: str | None) -> bool:
    """A faster verdict that cost nothing beyond its tolerance: the only kind drawn as a gain."""
    return bool(status) and status.startswith(FASTER) and BUT not in status


CANNOT_TELL = "cannot tell apart here"


def decided(ratio) -> bool:
    """Whether a comparison (a Ratio) has its answer: faster or slower, or an interval that lies
    inside the band of gains too small to count (the same, within its minimum effect). Anything
    else cannot tell the two apart yet, and more pairs may."""
    if ratio.verdict in (FASTER, SLOWER):
        return True
    if ratio.low is None or ratio.high is None:
        return False
    return ratio.low >= 1 / (1 + ratio.min_effect) and ratio.high <= 1 + ratio.min_effect


def answer(ratio) -> str:
    """A comparison's answer in words: 'faster', 'slower', 'the same within 5 %', or that this
    machine cannot tell them apart (never a recommendation)."""
    if ratio.verdict in (FASTER, SLOWER):
        return ratio.verdict
    if decided(ratio):
        return f"the same within {ratio.min_effect:.0%}"
    return CANNOT_TELL
