"""Ratios on synthetic samples: the median's interval and its coverage, paired and unpaired
ratios, and too few rounds for a verdict."""

from __future__ import annotations

import random

import pytest

from workbench.measure.ratios import (
    median_interval,
    min_rounds,
    paired_ratio,
    paired_speed_ratio,
    unpaired_ratio,
)


def noisy(n, scale, spread, seed):
    rng = random.Random(seed)
    return [scale * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def test_the_median_interval_has_its_coverage():
    assert median_interval([1, 2, 3, 4, 5]) is None  # 5 rounds cannot carry 95 %
    assert median_interval([5, 1, 4, 2, 3, 6]) == (1, 6)
    low, high = median_interval(list(range(20)))
    assert (low, high) == (5, 14)  # P(Bin(20, .5) <= 5) = 2.1 %, each side
    assert min_rounds() == 6


def test_clear_win_clear_loss_overlap_and_tiny_effect():
    a = noisy(8, 10.0, 0.03, 1)
    win = paired_ratio(a, [x / 1.5 for x in a])
    assert win.verdict == "faster" and win.ratio == pytest.approx(1.5) and win.low > 1
    loss = paired_ratio(a, [x * 1.5 for x in a])
    assert loss.verdict == "slower" and loss.high < 1
    overlap = paired_ratio(noisy(8, 10, 0.3, 3), noisy(8, 10, 0.3, 4))
    assert overlap.verdict == "within noise" and overlap.low < 1 < overlap.high
    tiny = paired_ratio(a, [x / 1.02 for x in a])  # a real 2 % effect, below the minimum
    assert tiny.low > 1 and tiny.verdict == "within noise"


def test_too_few_rounds_give_no_verdict_and_say_why():
    r = paired_ratio([10, 10, 10], [5, 5, 5])
    assert r.ratio == 2 and r.verdict == "undecided" and r.low is None  # never "within noise"
    assert "too few" in r.note and "6" in r.note and "3 rounds" in r.label()


def test_speed_ratio_points_the_same_way_as_time_ratio():
    assert paired_speed_ratio([100] * 6, [200] * 6).ratio == paired_ratio([2] * 6, [1] * 6).ratio == 2


def test_unpaired_runs_get_a_bootstrap_interval_and_say_they_were_separate():
    r = unpaired_ratio(noisy(200, 10, 0.1, 5), noisy(200, 5, 0.1, 6))
    assert r.verdict == "faster" and 1.8 < r.low < 2 < r.high < 2.2 and not r.paired
    assert "separate runs" in r.note
    same = unpaired_ratio(noisy(200, 10, 0.1, 7), noisy(200, 10, 0.1, 8))
    assert same.verdict == "within noise"
