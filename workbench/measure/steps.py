"""A run's step figures after warm-up: the median step time with its spread, samples/s at the
median step and the share of time spent waiting for data. The trainer's summary and a tracked
script's (workbench.track) both come from here."""

from __future__ import annotations

import statistics

from ..events import SAMPLES_PER_S
from .warmup import warmup_steps


def step_stats(
    step_times: list[float], waits: list[float], batch: int, world_size: int, profiled: set = frozenset()
) -> dict:
    """Medians and spread after warm-up (the first steps pay for allocation and lazy init), leaving
    out profiled steps (numbered from 1): the profiler slows them."""
    skip = warmup_steps(len(step_times))
    kept = [i for i in range(skip, len(step_times)) if i + 1 not in profiled]
    times = [step_times[i] for i in kept] or step_times
    wait = [waits[i] for i in kept] or waits
    med = statistics.median(times)
    q = statistics.quantiles(times, n=10) if len(times) >= 2 else [med] * 9
    return {
        "step_time_ms_median": round(med * 1e3, 4),
        "step_time_ms_p10": round(q[0] * 1e3, 4),
        "step_time_ms_p90": round(q[-1] * 1e3, 4),
        SAMPLES_PER_S: round(batch * world_size / med, 2),
        "data_wait_frac": round(sum(wait) / sum(times), 4),
    }
