"""A rate limit for redraws: at most `max_per_s`, whatever the step rate.

t = Throttle(4.0); if t.ready(): redraw()
"""

from __future__ import annotations

import time
from typing import Callable


class Throttle:
    """`ready()` is true at most `max_per_s` times a second (the clock is injectable for tests)."""

    def __init__(self, max_per_s: float = 4.0, clock: Callable[[], float] = time.monotonic):
        if not max_per_s > 0:
            raise ValueError(f"max_per_s must be > 0, got {max_per_s!r}")
        self.min_interval_s = 1.0 / max_per_s
        self.clock = clock
        self._last = float("-inf")

    def ready(self) -> bool:
        now = self.clock()
        if now - self._last >= self.min_interval_s:
            self._last = now
            return True
        return False

    def wait_s(self) -> float:
        """Seconds until `ready()` can next be true."""
        return max(0.0, self._last + self.min_interval_s - self.clock())
