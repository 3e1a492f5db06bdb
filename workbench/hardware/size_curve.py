"""How much faster a 16-bit matmul runs than fp32's on this device, by the size of the matrices:
the curve on which a model's own matrix products are placed, so a precision lesson can say why
its model gains or loses (a CPU's bf16 units pay on large matrices and not on small ones).

    curve = size_curve("cpu")          # measured here, or recalled under the same conditions
    curve.ratio("bf16", 1024)          # a Ratio: bf16's speed over fp32's at 1024 x 1024
    curve.faster_from("bf16")          # the narrowest side from which every wider one is faster

Square n x n matmuls in fp32, bf16 and fp16 are a trial of this process (workbench.trials): their
calls take turns in short chunks inside each slice and the rounds alternate, so each pair met the
same machine; each side adds pairs until every 16-bit type is decided (faster, slower, or the same
within the minimum effect) or ROUNDS_MAX. The threads are the thread rule's for what other programs
leave free, as a run's would be. A 16-bit type whose one call takes over CALL_CAP_S at some side is
left out from that side on, and the curve says so. It is kept in a cache file per set of
conditions, as the ceilings are: the curve is a fact of the machine; a lesson is of a model.
"""

from __future__ import annotations

import math
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from ..cache import write_json
from ..machine.conditions import cache_name, conditions, kept_under
from ..machine.contention import ContentionMeter, is_busy
from ..machine.threads import choose_threads, other_cores_now
from ..measure.ratios import Ratio, min_rounds
from ..measure.verdict import FASTER, decided
from ..quick import quick
from ..train.precision import DTYPES
from ..trials.calls import LocalHost
from ..trials.engine import Trial

SIDES = (32, 64, 128, 256, 512, 1024)
QUICK_SIDES = (32, 128, 512)  # quick mode: fewer sides, the same path
SIXTEEN = ("bf16", "fp16")
ROUNDS_MAX = 12
CALL_CAP_S = 0.25  # one call slower than this: that type is left out from this side on
CURVE = "lessons/size-curve"


@dataclass
class SizeCurve:
    """dtype -> {side: Ratio of its speed over fp32's}, with what was left out and how it was measured."""

    points: dict = field(default_factory=dict)
    left_out: dict = field(default_factory=dict)  # dtype -> why its wider sides were not measured
    threads: int = 1
    source: str = ""

    def sides(self, dtype: str) -> list[int]:
        return sorted(self.points.get(dtype, {}))

    def ratio(self, dtype: str, side: int) -> Ratio | None:
        return self.points.get(dtype, {}).get(side)

    def faster_from(self, dtype: str) -> int | None:
        """The narrowest measured side from which every wider measured side is faster, or None."""
        start = None
        for side in reversed(self.sides(dtype)):
            if self.points[dtype][side].verdict != FASTER:
                break
            start = side
        return start

    def nearest(self, dtype: str, width: float) -> int | None:
        """The measured side nearest to `width` on a log scale (a matmul's side, any size)."""
        sides = self.sides(dtype)
        if not sides:
            return None
        return min(sides, key=lambda s: abs(math.log2(s / max(width, 1e-9))))

    def at(self, dtype: str, side: float) -> float | None:
        """The curve's ratio at any side: read between its measured sides on log-log axes, held
        flat past its ends."""
        xs = self.sides(dtype)
        if not xs:
            return None
        side = min(max(side, xs[0]), xs[-1])
        for lo, hi in zip(xs, xs[1:]):
            if lo <= side <= hi:
                t = math.log(side / lo) / math.log(hi / lo)
                a, b = self.ratio(dtype, lo).ratio, self.ratio(dtype, hi).ratio
                return math.exp(math.log(a) + t * (math.log(b) - math.log(a)))
        return self.ratio(dtype, xs[0]).ratio

    def matmuls_speedup(self, dtype: str, matmuls: list) -> float | None:
        """What these matmuls alone would gain in `dtype` by the curve: their fp32 time over their
        16-bit time, each matmul's time its FLOPs over the curve's ratio at its side."""
        ratios = [self.at(dtype, m["side"]) for m in matmuls]
        if not matmuls or None in ratios:
            return None
        return sum(m["flops"] for m in matmuls) / sum(m["flops"] / r for m, r in zip(matmuls, ratios))

    def as_dict(self) -> dict:
        return {
            "points": {d: {str(s): r.__dict__ for s, r in p.items()} for d, p in self.points.items()},
            "left_out": self.left_out,
            "threads": self.threads,
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "SizeCurve":
        points = {dt: {int(s): Ratio(**r) for s, r in p.items()} for dt, p in d["points"].items()}
        return cls(points, d.get("left_out", {}), d.get("threads", 1), d.get("source", ""))


@contextmanager
def rule_threads(threads: int | None = None):
    """torch's threads in this process set to `threads`, or by the thread rule for what other
    programs leave free; then restored. Yields the count. Where the rule would have several threads
    wait passively (others hold the cores) and this process's OpenMP spins (its wait policy is set
    once, at its start), one thread is used: spinning threads collapse beside busy programs."""
    from ..config import RunConfig
    from ..machine.threads import WAIT_ENV, waits_passively

    other = other_cores_now()
    count = threads or choose_threads(RunConfig.default(), other).threads
    if waits_passively(count, other) and os.environ.get(WAIT_ENV, "").upper() != "PASSIVE":
        count = 1
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield count
    finally:
        torch.set_num_threads(before)


def _one_call_s(fn, device) -> float:
    from ..measure.timer import device_sync

    fn()  # the first call pays for the kernel's set-up
    device_sync(device)
    t0 = time.perf_counter()
    fn()
    device_sync(device)
    return time.perf_counter() - t0


def measure_curve(device, sides=None, slice_s: float | None = None) -> tuple[dict, dict]:
    """(points, left_out): each 16-bit type's speed over fp32's at each side, see the module."""
    device = torch.device(device)
    sides = sides or (QUICK_SIDES if quick() else SIDES)
    slice_s = slice_s or (0.04 if quick() else 0.1)
    g = torch.Generator().manual_seed(0)
    live = ["fp32", *SIXTEEN]
    points: dict = {d: {} for d in SIXTEEN}
    left_out: dict = {}
    for n in sides:
        fns = {}
        for d in live:
            a, b = (torch.randn(n, n, generator=g).to(device, DTYPES[d]) for _ in range(2))
            fns[d] = lambda a=a, b=b: a @ b
        for d in list(live):
            took = _one_call_s(fns[d], device)
            if took > CALL_CAP_S:
                live.remove(d)
                left_out[d] = f"{n} wide and wider: one call took {took:.2f} s"
        if "fp32" not in live:
            break
        host = LocalHost({d: fns[d] for d in live}, device=device)
        trial = Trial({d: host for d in live}, "fp32", slice_s=slice_s).run(min_rounds())
        others = [d for d in live if d != "fp32"]
        while trial.rounds < ROUNDS_MAX and not all(decided(trial.compare(d).ratio) for d in others):
            trial.round()
        for d in others:
            points[d][n] = trial.compare(d).ratio
    return {d: p for d, p in points.items() if p}, left_out


def size_curve(
    device="cpu", refresh: bool = False, threads: int | None = None, measure: bool = True
) -> SizeCurve | None:
    """This device's curve at `threads` (None: the thread rule's count): recalled from a measurement
    under the same conditions, or measured now (seconds) and kept, unless `measure` is False (then
    None: a command asked to stop measures nothing new). The first curve kept for a set of
    conditions stands."""
    device = torch.device(device)
    with rule_threads(threads) as count:
        now = {**conditions(device, is_busy(other_cores_now())), "threads": count}
        kept = kept_under(CURVE, now, refresh)
        if kept is not None:
            return SizeCurve.from_dict(kept["curve"])
        if not measure:
            return None
        meter = ContentionMeter()
        points, left_out = measure_curve(device)
        other = meter.read()["other_cpu_cores"]
    met = {**now, "busy": is_busy(other)}
    kept = kept_under(CURVE, met, refresh)
    if kept is not None:  # the load changed as it started: that answer stands
        return SizeCurve.from_dict(kept["curve"])
    load = f"beside other programs holding {other:.1f} cores" if is_busy(other) else "quiet"
    curve = SizeCurve(
        points,
        left_out,
        count,
        f"square matmuls measured {time.strftime('%Y-%m-%d %H:%M')}, {count} thread(s), {load}",
    )
    write_json(cache_name(CURVE, met), {"conditions": met, "curve": curve.as_dict()})
    return curve
