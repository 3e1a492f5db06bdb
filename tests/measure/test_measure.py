"""The measurement core on synthetic samples: the interval, the verdict rule (clear win, clear loss,
overlap, tiny effect, too few rounds), and rounds that alternate their order."""

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
from workbench.trials.calls import timed_calls
from workbench.measure.verdict import is_clean_gain, verdict, weighed


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
    assert r.ratio == 2 and r.verdict == "within noise" and r.low is None
    assert "too few" in r.note and "6" in r.note and "3 rounds" in r.label()


def test_speed_ratio_points_the_same_way_as_time_ratio():
    assert paired_speed_ratio([100] * 6, [200] * 6).ratio == paired_ratio([2] * 6, [1] * 6).ratio == 2


def test_unpaired_runs_get_a_bootstrap_interval_and_say_they_were_separate():
    r = unpaired_ratio(noisy(200, 10, 0.1, 5), noisy(200, 5, 0.1, 6))
    assert r.verdict == "faster" and 1.8 < r.low < 2 < r.high < 2.2 and not r.paired
    assert "separate runs" in r.note
    same = unpaired_ratio(noisy(200, 10, 0.1, 7), noisy(200, 10, 0.1, 8))
    assert same.verdict == "within noise"


def test_verdict_rule_needs_both_the_interval_and_the_minimum_effect():
    assert verdict(1.3, (1.1, 1.5)) == "faster"
    assert verdict(1.3, (0.9, 1.5)) == "within noise"
    assert verdict(0.7, (0.6, 0.8)) == "slower"
    assert verdict(1.03, (1.01, 1.05)) == "within noise"
    assert verdict(None) is None


def test_a_verdict_that_cost_accuracy_says_so_and_is_no_clean_gain():
    lost = weighed("faster", 0.995, 0.273)
    assert lost == "faster, but accuracy 0.995 -> 0.273" and not is_clean_gain(lost)
    assert weighed("faster", 0.995, 0.990) == "faster" and is_clean_gain("faster")  # within 0.01
    assert weighed("faster, partial: 40% of the weights", 0.9, 0.5).endswith("but accuracy 0.900 -> 0.500")
    assert weighed("within noise", None, 0.5) == "within noise" and weighed(None, 0.9, 0.1) is None
    assert not is_clean_gain("within noise") and not is_clean_gain(None)


def test_compression_and_stacking_rows_that_lost_accuracy_are_never_painted_as_gains():
    from workbench.compress.reasons import judge
    from workbench.ui.table import STATUS_COLORS, status_color

    timing = {
        "speedup_b64": 1.62,
        "speedup_b64_low": 1.5,
        "speedup_b64_high": 1.7,
        "speedup_b64_verdict": "faster",
        "speedup_b64_rounds": 15,
    }
    row = judge("structured", timing, 0.5, accuracy=(0.995, 0.273))
    assert row["verdict"].startswith("faster, but accuracy 0.995 -> 0.273")
    assert status_color(row["verdict"]) != STATUS_COLORS["faster"]
    assert status_color("faster, partial: 40% of the weights") == STATUS_COLORS["faster"]
    assert judge("structured", timing, 0.5, accuracy=(0.995, 0.99))["verdict"] == "faster"


def test_interleaved_alternates_the_order_of_variants():
    calls = []
    timed_calls({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, warmup=0, rounds=4)
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
