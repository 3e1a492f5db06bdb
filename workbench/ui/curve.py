"""Curve: one chart line that stays cheap to draw however long the run grows.

    c = Curve(); c.append(step, value); xs, ys = c.xy()   # at most about 2 x MAX_BUCKETS points

Points are kept in buckets of equal width in steps; each bucket holds its first x, its lowest and
highest point and whether it saw a non-finite value. When the buckets fill up, neighbours merge
(the width doubles), so appending is O(1) amortised and drawing is O(buckets), not O(steps): a
million-step run draws like a thousand-step one. Min and max keep a spike visible; a bucket that
saw NaN or inf draws a gap and is listed in `nonfinite`, so a diverged step is never thinned away.
Up to MAX_BUCKETS points, nothing is thinned: `xy()` returns every point.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

# A chart is about 360 px wide inside: 300 buckets are a pixel column's low and high each, and
# what a redraw sends to a page (that may be on a busy machine) stays small.
MAX_BUCKETS = 300
RECENT = 64  # the last values, kept as they are, for readouts and rolling medians


class Curve:
    def __init__(self, max_buckets: int = MAX_BUCKETS):
        self.max_buckets = max_buckets
        self.width = 1  # points per bucket
        self.n = 0
        # one list per field, a bucket per index: x of the first point, then (x, y) of min and max
        self._x0: list[float] = []
        self._lo: list[tuple[float, float]] = []
        self._hi: list[tuple[float, float]] = []
        self._count: list[int] = []
        self._bad: list[bool] = []
        self.nonfinite: deque = deque(maxlen=200)  # x of non-finite values, most recent kept
        self.recent: deque = deque(maxlen=RECENT)

    def __len__(self) -> int:
        return self.n

    def append(self, x: float, y: float | None) -> None:
        if y is None:
            return
        y = float(y)
        self.n += 1
        self.recent.append(y)
        finite = math.isfinite(y)
        if not finite:
            self.nonfinite.append(x)
        if self._count and self._count[-1] < self.width:
            i = len(self._count) - 1
            self._count[i] += 1
            if finite:
                if not math.isfinite(self._lo[i][1]) or y < self._lo[i][1]:
                    self._lo[i] = (x, y)
                if not math.isfinite(self._hi[i][1]) or y > self._hi[i][1]:
                    self._hi[i] = (x, y)
            else:
                self._bad[i] = True
            return
        self._x0.append(x)
        self._lo.append((x, y))
        self._hi.append((x, y))
        self._count.append(1)
        self._bad.append(not finite)
        if len(self._count) > self.max_buckets:
            self._merge()

    def _merge(self) -> None:
        """Halve the buckets: each pair becomes one of twice the width."""
        x0, lo, hi, count, bad = [], [], [], [], []
        for i in range(0, len(self._count), 2):
            j = min(i + 1, len(self._count) - 1)
            x0.append(self._x0[i])
            lo.append(_pick(self._lo[i], self._lo[j], min))
            hi.append(_pick(self._hi[i], self._hi[j], max))
            count.append(self._count[i] + (self._count[j] if j != i else 0))
            bad.append(self._bad[i] or (self._bad[j] and j != i))
        self._x0, self._lo, self._hi, self._count, self._bad = x0, lo, hi, count, bad
        self.width *= 2

    def xy(self) -> tuple[np.ndarray, np.ndarray]:
        """The points to draw, in x order: per bucket its low and high point (one when they are the
        same), and a NaN after a bucket that saw a non-finite value, which breaks the line there."""
        xs: list[float] = []
        ys: list[float] = []
        for lo, hi, bad in zip(self._lo, self._hi, self._bad):
            first, second = (lo, hi) if lo[0] <= hi[0] else (hi, lo)
            if math.isfinite(first[1]):
                xs.append(first[0])
                ys.append(first[1])
            if second != first and math.isfinite(second[1]):
                xs.append(second[0])
                ys.append(second[1])
            if bad:
                xs.append(second[0])
                ys.append(math.nan)
        return np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)

    @property
    def buckets(self) -> int:
        return len(self._count)


def _pick(a: tuple[float, float], b: tuple[float, float], best) -> tuple[float, float]:
    """The lower (min) or higher (max) of two points, ignoring a non-finite one."""
    if not math.isfinite(a[1]):
        return b
    if not math.isfinite(b[1]):
        return a
    return a if best(a[1], b[1]) == a[1] else b


class RollingMedian:
    """The median of the last `window` values, updated per value (a readable throughput line)."""

    def __init__(self, window: int = 25):
        self.values: deque = deque(maxlen=window)

    def push(self, y: float) -> float:
        self.values.append(y)
        ordered = sorted(self.values)
        return ordered[len(ordered) // 2]
