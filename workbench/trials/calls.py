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

from ..machine.contention import ContentionMeter
from ..measure.timer import device_sync, summarize
from ..measure.order import order_of
from .engine import Slice, Trial


CHUNK_S = 0.02  # seconds of one function's calls before the next takes its turn inside a slice


class LocalHost:
    """Variants that are functions in this process: `fn()` does one unit of work (an inference call,
    a matmul, a launch) and returns how much it did (None: `work`, default 1). A slice calls it until
    `seconds` have passed, at least `min_calls` times; the slices of several (`pair`) take turns in
    chunks of CHUNK_S (A B B A ...), so they meet the same machine moment by moment."""

    def __init__(
        self, fns: dict[str, Callable[[], object]], *, work: float = 1.0, device=None, min_calls: int = 1
    ):
        self.fns, self.work, self.device, self.min_calls = dict(fns), work, device, min_calls

    def slice(self, label: str, seconds: float) -> Slice:
        return self.pair([label], seconds)[label]

    def _chunk(self, label: str, seconds: float, calls_before: int) -> tuple[float, float, int]:
        """(work, seconds, calls) of one turn: calls until `seconds` have passed and, counting
        `calls_before`, at least min_calls were made."""
        fn, done, calls = self.fns[label], 0.0, 0
        t0 = time.perf_counter()
        while True:
            got = fn()
            counted = isinstance(got, (int, float)) and not isinstance(got, bool)
            done += float(got) if counted else self.work
            calls += 1
            if calls_before + calls >= self.min_calls:
                device_sync(self.device)
                if time.perf_counter() - t0 >= seconds:
                    return done, time.perf_counter() - t0, calls

    def pair(self, labels: list[str], seconds: float) -> dict[str, Slice]:
        meter = ContentionMeter(os.getpid())
        work, walls, calls = ({k: 0.0 for k in labels}, {k: 0.0 for k in labels}, {k: 0 for k in labels})
        turn = 0
        while turn == 0 or any(walls[k] < seconds for k in labels):
            for label in order_of(labels, turn):
                if turn and walls[label] >= seconds:
                    continue
                w, dt, n = self._chunk(label, min(CHUNK_S, seconds - walls[label]), calls[label])
                work[label] += w
                walls[label] += dt
                calls[label] += n
            turn += 1
        seen = meter.read()
        own, total = seen["own_cpu_cores"] * seen["wall_s"], max(sum(walls.values()), 1e-9)
        return {
            k: Slice(k, work[k], walls[k], own * walls[k] / total, seen["other_cpu_cores"], steps=calls[k])
            for k in labels
        }


def timed_calls(
    fns: dict[str, Callable[[], object]], *, device=None, warmup: int = 3, rounds: int = 10, inner: int = 1
) -> dict:
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
