"""What a workbench rank attaches to the training loop (workbench.train.loop) as hooks: the phase
an error names, the end of the warm-up, the profiler's steps and the one step that measures what a
step holds, and the step's event with its figures. The exported `train.py` runs the same loop
without them.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from functools import partial

import torch

from ..events import (
    DATA_WAIT_MS,
    GRAD_SCALE,
    LAST,
    LOSS,
    NONFINITE_LOSSES,
    PROFILED,
    SAMPLES_PER_S,
    SKIPPED_STEPS,
    STEP,
    STEP_NUMBER,
    STEP_TIME_MS,
)
from . import memory_readings
from .loop import Hook, StepResult
from .rank import unwrap
from .saved_tensors import saved_for_backward
from .sharding import ACTIVATIONS, GRADIENTS, grad_bytes


class PhaseNames(Hook):
    """Names the step a rank is in, so an error or a stall says "step 3"."""

    def __init__(self, phase):
        self.phase = phase

    def before(self, step: int, fn):
        self.phase.name = f"step {step}"
        return fn


class WarmupEnd(Hook):
    """At the first step after the warm-up: the contention reading starts again (the figures leave
    the warm-up out, so does their noise guard), and so does a compiled run's time budget (its first
    steps are its compile)."""

    def __init__(self, warmup: int, meter, budget, compiled: bool):
        self.warmup, self.meter, self.budget, self.compiled = warmup, meter, budget, compiled

    def before(self, step: int, fn):
        if step == self.warmup + 1:
            if self.meter is not None:
                self.meter.restart()
            if self.compiled:
                self.budget.restart()
        return fn


class Profiling(Hook):
    """The profiler's steps run under its ranges; the first step not profiled measures what a step
    holds (gradients, activations) into `out.held`, once."""

    def __init__(self, profiler, model, out):
        self.profiler, self.model, self.out = profiler, model, out

    def before(self, step: int, fn):
        if self.profiler:
            fn = self.profiler.step_fn(step)
            if self.profiler.profiled(step):
                self.out.profiled.add(step)
                return fn
        if not self.out.held:
            self.out.measured = len(self.out.times) + 1
            return partial(fn, phase=measuring(self.model, self.out.held))
        return fn


class StepEvents(Hook):
    """The step's event (its figures, MFU, memory on a timer, fp16's scale and skipped steps,
    non-finite losses, and `last` where the time budget ended the steps early), and what the
    summary reads of it in `out`."""

    def __init__(self, events, out, s, mem_every_s: float, fp16: bool, total_steps: int):
        self.events, self.out, self.s = events, out, s
        self.mem_every_s, self.fp16, self.total_steps = mem_every_s, fp16, total_steps
        self.next_mem = 0.0
        self.scale_before = 1.0

    def before(self, step: int, fn):
        if self.fp16:
            self.scale_before = self.s.parts.scaler.get_scale()
        return fn

    def after(self, r: StepResult) -> None:
        out = self.out
        rec = {
            STEP_NUMBER: r.step,
            LOSS: r.loss,
            STEP_TIME_MS: round(r.seconds * 1e3, 4),
            DATA_WAIT_MS: round(r.wait * 1e3, 4),
            SAMPLES_PER_S: round(r.samples / r.seconds, 2),
            **self.s.mfu.step(r.seconds),
            **r.record,
        }
        if r.step in out.profiled:
            rec[PROFILED] = True
        if not math.isfinite(r.loss):
            out.nonfinite += 1
            out.first_nonfinite = out.first_nonfinite or r.step
            rec[NONFINITE_LOSSES] = out.nonfinite
        if self.fp16:
            scale = self.s.parts.scaler.get_scale()
            out.skipped += scale < self.scale_before
            rec.update({GRAD_SCALE: scale, SKIPPED_STEPS: out.skipped})
        now = time.perf_counter()
        if now >= self.next_mem:
            self.next_mem = now + self.mem_every_s
            rec.update(memory_readings.sample(self.s.parts.device))
        if r.last and r.step < self.total_steps:
            rec[LAST] = True  # the watchdog: evaluating and saving from here, not stalled
        self.events.write(STEP, **rec)
        if out.first_step_s is None:
            out.first_step_s = time.time() - self.s.t_launch
        out.times.append(r.seconds)
        out.waits.append(r.wait)
        out.losses.append(r.loss)


def measuring(model: torch.nn.Module, into: dict):
    """A step's phase context that records what this rank holds mid-step: into[ACTIVATIONS], the
    bytes autograd saves for backward in the forward of a micro-batch (the largest, when several),
    and into[GRADIENTS], the gradient bytes as the optimizer part begins (after backward, before
    they are zeroed)."""
    plain = unwrap(model)

    @contextmanager
    def phase(name: str):
        if name == "forward":
            with saved_for_backward(plain) as saved:
                yield
            into[ACTIVATIONS] = max(into.get(ACTIVATIONS, 0), sum(nbytes for nbytes, _ in saved.values()))
            return
        if name == "optimizer":
            into[GRADIENTS] = grad_bytes(plain)
        yield

    return phase
