"""Trial variants that are functions in this process (workbench.trials.engine): inference calls,
matmuls, optimizer steps, whole commands a benchmark starts.

    calls = LocalHost({"dense": lambda: model(x), "int8": lambda: q(x)}, work=64)
    Trial({"dense": calls, "int8": calls}).run(8).compare("int8")
    timed_calls({"a": f, "b": g}, rounds=10)      # label -> Timing of ms a call, by round
"""
from __future__ import annotations

import os
import time
from typing import Callable

from ..machine.contention import system_cpu, tree_cpu
from ..measure.timer import device_sync, summarize
from .engine import Slice, Trial


class LocalHost:
    """Variants that are functions in this process: `fn()` does one unit of work (an inference call,
    a matmul, a launch) and returns how much it did (None: `work`, default 1). A slice calls it until
    `seconds` have passed, at least `min_calls` times."""

    def __init__(self, fns: dict[str, Callable[[], object]], *, work: float = 1.0, device=None,
                 min_calls: int = 1):
        self.fns, self.work, self.device, self.min_calls = dict(fns), work, device, min_calls

    def slice(self, label: str, seconds: float) -> Slice:
        fn, done, calls = self.fns[label], 0.0, 0
        sys0, own0 = system_cpu(), tree_cpu(os.getpid())
        t0 = time.perf_counter()
        while True:
            got = fn()
            counted = isinstance(got, (int, float)) and not isinstance(got, bool)
            done += float(got) if counted else self.work
            calls += 1
            if calls >= self.min_calls:
                device_sync(self.device)
                if time.perf_counter() - t0 >= seconds:
                    break
        wall = time.perf_counter() - t0
        sys1, own1 = system_cpu(), tree_cpu(os.getpid())
        own = own1 - own0
        other = max(0.0, (sys1[0] - sys0[0] - own) / wall) if sys1[2] > sys0[2] else None
        return Slice(label, done, wall, own, None if other is None else round(other, 3),
                     steps=calls)


def timed_calls(fns: dict[str, Callable[[], object]], *, device=None, warmup: int = 3,
                rounds: int = 10, inner: int = 1) -> dict:
    """Time functions as a trial of single slices: each round calls every one `inner` times (at
    least), in alternating order, after `warmup` calls each. label -> Timing of ms a call, its
    samples by round: round i of every function was measured side by side, which is what
    `measure.compare.paired_ratio` pairs."""
    host = LocalHost(fns, device=device, min_calls=max(1, inner))
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    trial = Trial({k: host for k in fns}, slice_s=0.0, warmup=0).run(rounds)
    return {k: summarize([s.wall_s / s.steps * 1e3 for s in trial.slices[k]]) for k in fns}
