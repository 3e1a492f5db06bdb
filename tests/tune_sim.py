"""A simulated device for the tune search's calibration: every setting's true speedup is known,
and runs look like real ones (step times with noise, slow drift and outliers, a start-up cost,
busy rounds where other programs collapse one side), so the search can be checked against the
truth over many seeded trials without hardware luck. The defaults are noisier than a quiet
machine: 15 % per step, one step in ten 2-5x slow, the pace wandering by 30 % over minutes. A
setting in `compile_s` has one-off work before its rounds (a compile) that costs that many seconds
once; later runs reuse its cache, as real compiled runs do."""

from __future__ import annotations

import math
import random
import statistics

from workbench.trials.changes import Change
from workbench.tune.search import LossCheck, Prepared, Round

STEP_S = 0.05  # the baseline's step
START_S = 2.0  # a run's start-up, paid every run


class SimulatedDevice:
    def __init__(
        self,
        candidates: list[Change],
        effects: dict[str, float],
        seed: int,
        *,
        noise: float = 0.15,
        drift: float = 0.3,
        outliers: float = 0.1,
        busy: float = 0.0,
        steps: int = 20,
        loss_moves: dict[str, float] | None = None,
        tolerance: float = 0.02,
        compile_s: dict[str, float] | None = None,
    ):
        self.candidates = {c.key: c.settings for c in candidates}
        self.effects, self.rng = effects, random.Random(seed)
        self.noise, self.drift, self.outliers, self.busy, self.steps = noise, drift, outliers, busy, steps
        self.loss_moves, self.tolerance = loss_moves or {}, tolerance
        self.compile_s, self.compiled = compile_s or {}, set()
        self.t = 0.0
        self.rounds = 0

    def applied(self, settings: dict) -> list[str]:
        return [k for k, s in self.candidates.items() if all(settings.get(f) == v for f, v in s.items())]

    def speed(self, settings: dict) -> float:
        return math.prod(self.effects[k] for k in self.applied(settings))

    def _run(self, settings: dict, collapse: bool) -> float:
        """One run: its rate (steps per second) from the median step, as the real runs report."""
        times = []
        for _ in range(self.steps):
            slow = 1 + self.drift * math.sin(self.t / 90)  # the machine's pace wanders over minutes
            x = STEP_S / self.speed(settings) * slow * self.rng.lognormvariate(0, self.noise)
            if self.rng.random() < self.outliers:
                x *= self.rng.uniform(2, 5)
            if collapse:
                x *= self.rng.uniform(2, 20)  # spinning threads beside busy processes
            self.t += x
            times.append(x)
        self.t += START_S
        return 1 / statistics.median(times)

    def refusal(self, candidate: dict) -> str | None:
        return None

    def round(self, best: dict, candidate: dict) -> Round:
        busy = self.rng.random() < self.busy
        hit = self.rng.choice(("best", "candidate")) if busy else None
        order = ("best", "candidate") if self.rounds % 2 == 0 else ("candidate", "best")
        self.rounds += 1
        rate = {}
        for side in order:
            rate[side] = self._run(best if side == "best" else candidate, collapse=side == hit)
        return Round(rate["candidate"] / rate["best"], dropped=busy)

    def conditions(self, best: dict, candidate: dict) -> str:
        return "simulated"

    def loss_check(self, best: dict, candidate: dict) -> LossCheck:
        moved = abs(
            sum(self.loss_moves.get(k, 0.0) for k in self.applied(candidate))
            - sum(self.loss_moves.get(k, 0.0) for k in self.applied(best))
        )
        moved += abs(self.rng.gauss(0, 0.002))
        ok = moved <= self.tolerance
        return LossCheck(ok, moved, f"moved {moved:.1%} (tolerance {self.tolerance:.0%})")

    def _compiles(self, settings: dict) -> list[str]:
        return [k for k in self.applied(settings) if k in self.compile_s and k not in self.compiled]

    def one_off(self, best: dict, candidate: dict) -> str | None:
        return "compiling" if self._compiles(candidate) else None

    def prepare(self, best: dict, candidate: dict, timeout_s: float) -> Prepared:
        work = sum(self.compile_s[k] for k in self._compiles(candidate))
        if work > timeout_s:
            self.t += timeout_s
            return Prepared(timeout_s, failed=f"did not finish in {timeout_s:.0f} s")
        self.t += work
        self.compiled.update(self._compiles(candidate))
        run = START_S + self.steps * STEP_S * 1.5  # a run's start and steps, outliers included
        return Prepared(work, 2 * run)

    def clock(self) -> float:
        return self.t
