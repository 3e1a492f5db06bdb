"""The order of a round of interleaved variants: as given, then reversed, in turn (A B, B A, ...:
A B B A A B ...), so drift and other programs hit every variant alike. The one place the workbench
alternates an order: the trial engine's rounds and a host's interleaved steps both ask it."""

from __future__ import annotations


def order_of(labels, rnd: int) -> list:
    """The order of round `rnd` (from 0)."""
    return list(labels) if rnd % 2 == 0 else list(labels)[::-1]
