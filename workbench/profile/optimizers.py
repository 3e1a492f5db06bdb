"""Optimizer implementations side by side: the optimizer step of a config's model (its parameters,
random gradients) with `optim.impl` 'for-loop', 'foreach' and 'fused', timed in this process in
interleaved rounds (the measurement core's `interleaved`), each against the for-loop as a paired
ratio with its interval and the one verdict rule. An implementation the device lacks is refused
with the reason (the capability rule), not timed.

    c = compare_optimizers(cfg)          # builds the config's model here (a user's factory runs)
    c.frame                               # impl, median_ms, p10_ms, p90_ms, vs_for_loop, verdict
    print(c.text())
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch

from ..config import ConfigError, RunConfig
from ..machine.capability import resolve_device, unsupported_reason
from ..measure.ratios import Ratio, paired_ratio
from ..measure.timer import Timing, device_sync
from ..trials.calls import timed_calls
from ..train.data import build_data
from ..train.models import build_model
from ..machine.threads import threads_for
from ..train.step import OPTIMIZER_IMPLS, make_optimizer

IMPLS = ("for-loop", "foreach", "fused")
BASE = "for-loop"
TARGET_MS = 5.0  # each timed sample repeats the step until it lasts about this long


@dataclass
class OptimizerComparison:
    optimizer: str
    device: str
    threads: int
    params: int
    timings: dict  # impl -> Timing
    ratios: dict  # impl -> Ratio, speed of impl over the for-loop
    refused: dict = field(default_factory=dict)  # impl -> why it cannot run here
    inner: int = 1

    @property
    def frame(self):
        import pandas as pd

        rows = []
        for impl in IMPLS:
            if impl in self.refused:
                rows.append({"impl": impl, "verdict": "skipped", "note": self.refused[impl]})
                continue
            t, r = self.timings[impl], self.ratios.get(impl)
            rows.append(
                {
                    "impl": impl,
                    "median_ms": t.median_ms,
                    "p10_ms": t.p10_ms,
                    "p90_ms": t.p90_ms,
                    "vs_for_loop": r.label() if r else "the reference",
                    "verdict": r.verdict if r else "baseline",
                    "note": "",
                }
            )
        return pd.DataFrame(rows)

    def text(self) -> str:
        lines = [
            f"{self.optimizer} step of {self.params:,} parameters on {self.device}, "
            f"{self.threads} thread(s), interleaved rounds of {self.inner} step(s) each:"
        ]
        for impl in IMPLS:
            if impl in self.refused:
                lines.append(f"  {impl:<9} refused: {self.refused[impl]}")
                continue
            t, r = self.timings[impl], self.ratios.get(impl)
            vs = f"vs for-loop {r.label()}" if r else "(the reference)"
            lines.append(f"  {impl:<9} {t.median_ms:9.3f} ms (p10-p90 {t.p10_ms:.3f}-{t.p90_ms:.3f})  {vs}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {
            "optimizer": self.optimizer,
            "device": self.device,
            "threads": self.threads,
            "params": self.params,
            "inner": self.inner,
            "refused": self.refused,
            "timings": {k: t.as_dict() for k, t in self.timings.items()},
            "ratios": {k: {**r.as_dict("speedup"), "label": r.label()} for k, r in self.ratios.items()},
        }


def _optimizer(cfg: RunConfig, params: list, impl: str):
    holder = SimpleNamespace(parameters=lambda: iter(params))  # make_optimizer asks for parameters()
    return make_optimizer(cfg.replace(**{"optim.impl": impl}), holder)


def _calibrate(fn, device) -> int:
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        device_sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return max(1, min(200, math.ceil(TARGET_MS / max(statistics.median(times), 1e-3))))


def compare_optimizers(cfg: RunConfig, impls=IMPLS, rounds: int = 10) -> OptimizerComparison:
    """Time `cfg`'s optimizer step in each implementation, interleaved, on the run's device."""
    unknown = [i for i in impls if i not in OPTIMIZER_IMPLS or i == "auto"]
    if unknown:
        raise ConfigError(f"impls must be among {', '.join(IMPLS)}, got {unknown[0]!r}")
    device = resolve_device(cfg.run.device)
    threads_before = torch.get_num_threads()
    torch.set_num_threads(threads_for(cfg))  # the run's own thread count, said in the result
    try:
        torch.manual_seed(cfg.run.seed)
        model = build_model(cfg, build_data(cfg)).to(device)
        refused = {
            i: why
            for i in impls
            if i == "fused" and (why := unsupported_reason(cfg, device, "fused_optimizer"))
        }
        steps = {}
        for impl in (i for i in impls if i not in refused):
            params = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
            for p in params:
                p.grad = torch.randn_like(p)  # random, never zeros
            steps[impl] = _optimizer(cfg, params, impl).step
        inner = _calibrate(steps[next(iter(steps))], device) if steps else 1
        timings: dict[str, Timing] = timed_calls(steps, device=device, rounds=rounds, inner=inner)
        ratios: dict[str, Ratio] = {}
        if BASE in timings:
            base = timings[BASE].samples_ms
            ratios = {i: paired_ratio(base, t.samples_ms) for i, t in timings.items() if i != BASE}
        return OptimizerComparison(
            cfg.optim.name,
            str(device),
            torch.get_num_threads(),
            sum(p.numel() for p in model.parameters()),
            timings,
            ratios,
            refused,
            inner,
        )
    finally:
        torch.set_num_threads(threads_before)
