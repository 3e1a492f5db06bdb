"""Timed calls: rounds alternate the order of the variants."""

from __future__ import annotations

from workbench.trials.calls import timed_calls


def test_interleaved_alternates_the_order_of_variants():
    calls = []
    timed_calls({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, warmup=0, rounds=4)
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
