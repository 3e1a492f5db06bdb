"""The one warm-up rule: how many first steps every figure leaves out (they pay for allocation and
lazy initialisation). The trainer's summary, the run store's comparisons, the loader lab's bars and
the exported script (a copy) all count from it."""

from __future__ import annotations


def warmup_steps(steps: int) -> int:
    """Steps left out of every figure: the first ones pay for allocation and lazy init."""
    return min(steps // 5, 10)
