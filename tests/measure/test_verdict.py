"""The verdict rule (the interval and the minimum effect) and a verdict that cost accuracy,
which is never painted as a gain."""

from __future__ import annotations

from workbench.measure.verdict import is_clean_gain, verdict, weighed


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


def test_a_comparison_is_decided_when_faster_slower_or_inside_the_band_of_no_gain():
    from workbench.measure.ratios import Ratio
    from workbench.measure.verdict import CANNOT_TELL, answer, decided

    faster = Ratio(1.3, 1.2, 1.4, 8, "faster")
    same = Ratio(1.01, 0.97, 1.04, 12, "within noise")
    wide = Ratio(1.01, 0.8, 1.3, 8, "within noise")
    none = Ratio(1.01, None, None, 4, "within noise")
    assert [decided(r) for r in (faster, same, wide, none)] == [True, True, False, False]
    assert [answer(r) for r in (faster, same, wide)] == ["faster", "the same within 5%", CANNOT_TELL]
