"""The one timer every measurement uses, so numbers compare across notebooks.

Warm up, synchronize the device before reading the clock, repeat, and report the median and the
spread (10th-90th percentile). Feed it random data, never zeros: some kernels skip work on zeros.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch


def device_sync(device: torch.device | str | None = None) -> None:
    """Wait for queued device work, so a clock read after it sees finished work."""
    dev = torch.device(device) if device is not None else None
    if dev is not None and dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elif dev is not None and dev.type == "mps":
        torch.mps.synchronize()


@dataclass
class Timing:
    median_ms: float
    p10_ms: float
    p90_ms: float
    repeats: int
    samples_ms: list = field(default_factory=list, repr=False)  # in measuring order

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: how much this figure can be trusted."""
        return (self.p90_ms - self.p10_ms) / self.median_ms if self.median_ms else 0.0

    @property
    def best_ms(self) -> float:
        """The fastest sample: what the device can do when nothing gets in the way."""
        return min(self.samples_ms) if self.samples_ms else self.median_ms

    def as_dict(self, prefix: str = "") -> dict:
        d = {
            "median_ms": self.median_ms,
            "p10_ms": self.p10_ms,
            "p90_ms": self.p90_ms,
            "repeats": self.repeats,
            "spread": round(self.spread, 4),
        }
        return {f"{prefix}{k}": v for k, v in d.items()}


def measure(
    fn: Callable[[], object],
    *,
    device=None,
    warmup: int = 3,
    repeats: int = 20,
    min_time_s: float = 0.0,
    inner: int = 1,
) -> Timing:
    """Time `fn` `repeats` times after `warmup` calls; each sample is `inner` calls averaged.

    With `min_time_s`, keeps sampling past `repeats` until that much time has been measured.
    """
    for _ in range(warmup):
        fn()
    device_sync(device)
    samples: list[float] = []
    total = 0.0
    while len(samples) < repeats or total < min_time_s:
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        device_sync(device)
        dt = time.perf_counter() - t0
        samples.append(dt / inner * 1e3)
        total += dt
        if len(samples) >= 10 * repeats:
            break
    return summarize(samples)


def summarize(samples_ms: list[float]) -> Timing:
    med = statistics.median(samples_ms)
    if len(samples_ms) >= 2:
        q = statistics.quantiles(samples_ms, n=10, method="inclusive")
        p10, p90 = q[0], q[-1]
    else:
        p10 = p90 = med
    return Timing(round(med, 5), round(p10, 5), round(p90, 5), len(samples_ms), list(samples_ms))
