"""The training loop: one for every rank the workbench starts and for the exported `train.py`,
which carries this code as source. Each step is the trainer's own (`train_step`); what watches the
steps is attached as hooks, so the exported script runs the same loop with none of the workbench's
instrumentation (its hooks print and write metrics) and the workbench's ranks attach theirs
(events, memory readings, MFU, the profiler, the thread trial: workbench.train.trainer).

    last = run_loop(parts, batches, first=1, steps=100, hooks=[...], spent=budget_spent,
                    save_every=10, save=keep_state)

A hook's `before(step, fn)` may hand back another step function (the profiler's, or one that
measures what a step holds) and its `after(result)` sees the step's result; a hook may add fields
to `result.record`, which the hooks after it read (the trainer's last hook writes it as the step's
event). Every `save_every` steps, and after the last one, `save(step)` keeps the resumable state, so
a finished run can be extended (`workbench run --resume RUN --steps N`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class StepResult:
    """One step as the loop saw it."""

    step: int
    loss: float
    samples: int  # this rank's samples in the step
    wait: float  # seconds spent waiting for data
    seconds: float  # the step's wall time
    last: bool  # the loop ends after it: its steps are done, or `spent` said so
    record: dict = field(default_factory=dict)  # what the hooks add, for the hooks after them


class Hook:
    """What the loop calls around each step; a hook overrides what it needs."""

    def before(self, step: int, fn: Callable) -> Callable:
        return fn

    def after(self, result: StepResult) -> None:
        pass


def run_loop(
    parts,
    batches,
    first: int,
    steps: int,
    hooks=(),
    *,
    step_fn: Callable,
    spent: Callable[[int], bool] = lambda step: False,
    save_every: int = 0,
    save: Callable[[int], None] | None = None,
) -> int:
    """Steps `first` to `steps` of `step_fn(parts, batches) -> (loss, samples, wait)`, ending early
    after a step where `spent(step)` (asked only before the last step, so every rank asks it as
    often); returns the last step run (first - 1: none)."""
    step = first - 1
    for step in range(first, steps + 1):
        fn = step_fn
        for hook in hooks:
            fn = hook.before(step, fn)
        t0 = time.perf_counter()
        loss, samples, wait = fn(parts, batches)
        seconds = time.perf_counter() - t0
        result = StepResult(step, loss, samples, wait, seconds, step == steps or spent(step))
        for hook in hooks:
            hook.after(result)
        if save_every and (step % save_every == 0 or result.last):
            save(step)
        if result.last:
            break
    return step
