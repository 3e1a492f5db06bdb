"""A busy machine's warm-up tries its thread counts in turn and keeps the faster one.

Under load the fastest thread count depended on the model and on how the machine shares its
cores (README, "On a busy machine": beside busy processes in its own session the default MLP ran
faster on 1 thread and the default transformer on 2 passive threads; beside busy processes in
sessions of their own both ran faster on 1 thread), so a look at the machine cannot choose between
them; a rank measuring its own steps can. The launch asks for a trial (workbench.machine.threads:
$WORKBENCH_THREAD_TRIAL) when it found other programs holding cores and chose the threads itself.
The warm-up's steps, which no figure counts, then run in turn
at each count (the launch's first), and the rest of the run keeps the count whose median step was
shorter. Each count's first step is left out of its median: it pays for that count's thread pool.
A warm-up too short to time each count on MIN_TIMED steps runs no trial and keeps the launch's count.
"""

from __future__ import annotations

import os
import statistics

import torch

from ..events import THREADS
from ..machine.threads import TRIAL_ENV
from .loop import Hook

MIN_TIMED = 3  # timed steps of each count at least: one step alone is a coin toss on a busy machine


class ThreadTrial:
    def __init__(self, candidates: tuple[int, ...], steps: int, warmup: int):
        self.candidates, self.steps, self.warmup = candidates, steps, warmup
        self.counts = " and ".join(str(n) for n in candidates)  # "2 and 1", as the records say them
        self.times: dict[int, list[float]] = {n: [] for n in candidates}
        self.kept: int | None = None

    @classmethod
    def from_env(cls, warmup: int) -> "ThreadTrial | None":
        """The trial the launch asked for, over the warm-up's first steps (as many for each count),
        or None when it asked for none. A warm-up too short for it gives a trial of no steps."""
        raw = os.environ.get(TRIAL_ENV, "")
        candidates = tuple(dict.fromkeys(int(n) for n in raw.split(",") if n.isdigit() and int(n)))
        if len(candidates) < 2:
            return None
        each = warmup // len(candidates)  # the first of them is not timed
        return cls(candidates, each * len(candidates) if each > MIN_TIMED else 0, warmup)

    def _count(self, i: int) -> int | None:
        return self.candidates[(i - 1) % len(self.candidates)] if i <= self.steps else None

    def before(self, i: int) -> int | None:
        """Sets the threads of the trial's i-th step (from 1) and returns them; None past the trial."""
        n = self._count(i)
        if n is not None:
            torch.set_num_threads(n)
        return n

    def after(self, i: int, seconds: float) -> dict | None:
        """Records the i-th step's time. After the last one, keeps the faster count and returns the
        trial's record for the summary; None before that."""
        n = self._count(i)
        if n is None:
            return None
        self.times[n].append(seconds)
        if i < self.steps:
            return None
        medians = {n: statistics.median(t[1:]) for n, t in self.times.items()}
        self.kept = min(medians, key=medians.get)
        torch.set_num_threads(self.kept)
        timed = self.steps // len(self.candidates) - 1
        ms = " and ".join(f"{medians[n] * 1e3:.3g} ms" for n in self.candidates)
        return {
            "median_step_ms": {str(n): round(m * 1e3, 4) for n, m in medians.items()},
            "timed_steps_each": timed,
            "kept": self.kept,
            "why": f"the warm-up tried {self.counts} thread(s) in turn, {timed} timed steps each: "
            f"median {ms} a step; kept {self.kept}",
        }

    def unfinished(self) -> dict | None:
        """The record of a trial that chose nothing, None if it chose: the warm-up was too short for
        it, or the run ended inside it. The launch's count stays."""
        if self.kept is not None:
            return None
        first = self.candidates[0]
        torch.set_num_threads(first)
        why = (
            f"the warm-up's {self.warmup} step(s) were too short to time each of {self.counts} "
            f"thread(s) on {MIN_TIMED} steps after its first: no trial"
            if not self.steps
            else "the run ended inside the warm-up's thread trial, before it chose"
        )
        return {"kept": first, "why": f"{why}; kept {first}"}


class TrialSteps(Hook):
    """The trial attached to a training loop (workbench.train.loop) whose first step is `first`: a
    trial step's record says its thread count, and `record()` says what the trial did."""

    def __init__(self, trial: ThreadTrial, first: int):
        self.trial, self.first = trial, first
        self.tried: int | None = None
        self.outcome: dict | None = None  # the trial's record, once it chose

    @classmethod
    def from_env(cls, warmup: int, first: int) -> "TrialSteps | None":
        """The trial the launch asked for (ThreadTrial.from_env), attached; None when it asked none."""
        trial = ThreadTrial.from_env(warmup)
        return cls(trial, first) if trial is not None else None

    def record(self) -> dict:
        """Once the loop has ended: what the trial kept and why, or why it kept the launch's count."""
        return self.trial.unfinished() or self.outcome

    def before(self, step: int, fn):
        self.tried = self.trial.before(step - self.first + 1)
        return fn

    def after(self, result) -> None:
        if self.tried is not None:
            result.record[THREADS] = self.tried
            self.outcome = self.trial.after(result.step - self.first + 1, result.seconds) or self.outcome
