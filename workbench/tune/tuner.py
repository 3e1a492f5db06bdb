"""Tune a config on this machine with real runs: what bounds its step (a profiling run), then the
search (workbench.tune.search) over the settings this machine and model can run, each round two
short runs side by side, and the recommended config with the reasons.

    report = tune(RunConfig.default().with_model("mynet.py:build"), budget_s=600)
    report.config          # the recommended RunConfig
    report.as_dict()       # {"config", "decisions": [{setting, kept, ratio, low, high, rounds,
                           #   loss_check, why, ...}], "bound_by", "spent_s", "memory_budget_gib",
                           #   "memory_note", "not_tried", ...}
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from ..config import ConfigError, RunConfig
from ..distributed.launch import launcher, run
from ..events import EVENT, LOSS, RANK, SAMPLES_PER_S, STEP, read_events
from ..machine.threads import choose_threads, other_cores_now
from .candidates import NOT_TRIED, reachable
from .memory import plan_memory
from .search import Decision, LossCheck, Prepared, Round, order, search

RUN_S = 3.0  # seconds of steps each run of a round gets (both sides the same)
# How far the mean loss over the same samples seen may move, relative: for bf16, fp16 and compile
# the same steps; for a larger batch fewer, larger steps over the same data, so a batch that learns
# less per sample at the same learning rate shows it here and is dropped (scaling the learning rate
# with the batch is a change of recipe, left to the user).
LOSS_TOLERANCE = 0.05
MAX_STEPS = 1_000_000  # a budgeted run's bound on steps: its time budget ends it first


def _key(settings: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in settings.items()))


def _losses(run_dir) -> list[float]:
    return [r[LOSS] for r in read_events(run_dir) if r.get(EVENT) == STEP and r.get(RANK) == 0
            and isinstance(r.get(LOSS), (int, float))]


class RealMeasure:
    """Rounds of real runs (workbench.distributed.launch.run): the best and the candidate once a
    round, in alternating order, each given `run_s` seconds of steps and the threads chosen from
    what other programs held at the round's start; a round is busy when the contention meter
    flagged either run."""

    def __init__(self, baseline: RunConfig, run_s: float = RUN_S,
                 on_run: Callable[[str, dict], None] | None = None,
                 stop: Callable[[], bool] | None = None):
        self.baseline = baseline.replace(**{"run.steps": MAX_STEPS, "run.time_budget_s": run_s,
                                            "run.eval_batches": 0, "run.save_weights": False})
        self.on_run, self.stop = on_run, stop
        self.pairs: dict[tuple, list[tuple[dict, dict]]] = {}  # (best, trial) -> their runs a round
        self.wall: dict[tuple, float] = {}  # settings -> seconds its last run took, start to end
        self.compiled: set[tuple] = set()  # settings whose compiled code is in the compile cache
        self.rounds = 0

    def config(self, settings: dict) -> RunConfig:
        return self.baseline.replace(**settings) if settings else self.baseline

    def refusal(self, candidate: dict) -> str | None:
        """What the launch would refuse (its checks, the memory and the batch against the data too)."""
        try:
            cfg = self.config(candidate)
            launcher().check(cfg)
        except ConfigError as e:
            return str(e)
        return None

    def _run(self, side: str, settings: dict, label: str, other, timeout_s: float) -> dict:
        cfg = self.config(settings).replace(**{"run.label": label})
        t0 = time.monotonic()
        try:
            summary = run(cfg, timeout_s=timeout_s, threads=choose_threads(cfg, other).fixed())
        except ConfigError as e:  # refused at launch: the machine changed since the refusal check
            summary = {"status": "refused", "message": str(e)}
        self.wall[_key(settings)] = time.monotonic() - t0
        if self.on_run is not None:
            self.on_run(side, summary)
        return summary

    def round(self, best: dict, candidate: dict) -> Round:
        if self.stop is not None and self.stop():
            return Round(None, failed="stopped by the user")
        other = other_cores_now()  # one look a round: both runs share what it saw
        sides = [("best", best), ("candidate", candidate)]
        out = {}
        for side, settings in sides if self.rounds % 2 == 0 else sides[::-1]:
            summary = self._run(side, settings, f"tune-{side}-r{self.rounds}", other,
                                max(300.0, 20 * self.baseline.run.time_budget_s))
            if summary.get("status") != "completed" or not summary.get(SAMPLES_PER_S):
                return Round(None, failed=f"the {side} run ended {summary.get('status')}: "
                                          f"{summary.get('message', '')} ({summary.get('run_dir')})")
            out[side] = summary
        self.rounds += 1
        self.pairs.setdefault((_key(best), _key(candidate)), []).append((out["best"], out["candidate"]))
        busy = any((s.get("contention") or {}).get("busy") for s in out.values())
        return Round(out["candidate"][SAMPLES_PER_S] / out["best"][SAMPLES_PER_S], busy)

    def _per_step(self, settings: dict) -> int:
        cfg = self.config(settings)
        return cfg.loader.batch_size * cfg.optim.grad_accum_steps * cfg.distributed.world_size

    def loss_check(self, best: dict, candidate: dict) -> LossCheck:
        """The mean loss over the samples both runs of a round saw (same seed: same data, same
        start; the same steps when the batch is the same), candidate against best, relative; the
        median over the comparison's rounds."""
        per = self._per_step(best), self._per_step(candidate)
        moves, seen = [], []
        for a, b in self.pairs.get((_key(best), _key(candidate)), []):
            la, lb = _losses(a["run_dir"]), _losses(b["run_dir"])
            common = min(len(la) * per[0], len(lb) * per[1])
            na, nb = common // per[0], common // per[1]
            if min(na, nb) >= 5:
                ma, mb = statistics.fmean(la[:na]), statistics.fmean(lb[:nb])
                moves.append(abs(mb - ma) / abs(ma) if ma else float("inf"))
                seen.append((min(na, nb), common))
        if not moves:
            return LossCheck(False, float("inf"), "too few steps in common to compare the losses")
        moved = statistics.median(moves)
        steps, samples = min(seen)
        over = (f"the same {steps}+ steps" if per[0] == per[1] else
                f"the same {samples:,}+ samples seen (batch {per[1]} against {per[0]} a step)")
        return LossCheck(moved <= LOSS_TOLERANCE, moved,
                         f"mean loss moved {moved:.1%} over {over} (tolerance {LOSS_TOLERANCE:.0%})")

    def one_off(self, best: dict, candidate: dict) -> str | None:
        compiles = self.config(candidate).compile.enabled
        return "compiling" if compiles and _key(candidate) not in self.compiled else None

    def prepare(self, best: dict, candidate: dict, timeout_s: float) -> Prepared:
        """One untimed compiled run fills the compile cache; a round is then estimated as that run
        and the best's last run: an upper bound, as later compiled runs reuse the cache."""
        t0 = time.monotonic()
        summary = self._run("compile", candidate, "tune-compile", other_cores_now(), timeout_s)
        took = time.monotonic() - t0
        if summary.get("status") != "completed":
            return Prepared(took, failed=f"its first compiled run ended {summary.get('status')} "
                                         f"with {timeout_s:.0f} s of the budget to spend on it: "
                                         f"{summary.get('message', '')}")
        self.compiled.add(_key(candidate))
        return Prepared(took, took + self.wall.get(_key(best), took))

    def clock(self) -> float:
        return time.monotonic()


@dataclass
class TuneReport:
    baseline: RunConfig
    config: RunConfig  # the recommended config: the baseline with the kept settings
    settings: dict
    decisions: list[Decision]
    bound_by: str | None
    bound_by_note: str
    spent_s: float
    budget_s: float
    memory_budget_gib: float | None = None
    memory_note: str = ""
    not_tried: dict = field(default_factory=lambda: dict(NOT_TRIED))

    def as_dict(self) -> dict:
        return {"config": self.config.to_dict(), "settings": self.settings,
                "decisions": [d.as_dict() for d in self.decisions], "bound_by": self.bound_by,
                "bound_by_note": self.bound_by_note, "spent_s": round(self.spent_s, 1),
                "budget_s": self.budget_s, "memory_budget_gib": self.memory_budget_gib,
                "memory_note": self.memory_note, "not_tried": self.not_tried}

    def text(self) -> str:
        lines = [f"tuned in {self.spent_s:.0f} s of {self.budget_s:.0f} s; {self.bound_by_note}",
                 self.memory_note]
        for d in self.decisions:
            ratio = (f"{d.ratio:.2f}x" + (f" [{d.low:.2f}, {d.high:.2f}]" if d.low is not None else "")
                     + f" over {d.rounds} rounds" if d.ratio is not None else "")
            busy = f", {d.busy_rounds} busy rounds repeated" if d.busy_rounds else ""
            loss = f"; {d.loss_check}" if d.loss_check else ""
            lines.append(f"  {'KEPT' if d.kept else 'drop'} {d.setting:14s} {ratio}{busy}: "
                         f"{d.outcome}{loss} ({d.why})")
        kept = ", ".join(f"{k}={v}" for k, v in self.settings.items()) or "nothing: the baseline"
        lines.append(f"recommended: {kept}")
        lines.append("not tried: " + "; ".join(f"{k} ({v})" for k, v in self.not_tried.items()))
        return "\n".join(lines)


def bound_by_of(baseline: RunConfig) -> tuple[str | None, str]:
    """What bounds the baseline's step, from a profiling run (workbench.profile)."""
    from ..profile.run import profile

    try:
        b = profile(baseline)
    except ConfigError as e:
        return None, f"no profile ({e}): the listed order"
    return b.verdict.bound_by, f"bound by {b.verdict.bound_by}: {b.verdict.reason}"


def tune(baseline: RunConfig, *, budget_s: float = 600.0, run_s: float = RUN_S,
         bound_by: str | None = None, profile: bool = True, memory_budget_gib: float | None = None,
         on_decision: Callable[[Decision], None] | None = None,
         on_run: Callable[[str, dict], None] | None = None,
         stop: Callable[[], bool] | None = None) -> TuneReport:
    """Plan the memory candidates within `memory_budget_gib` a rank (None: what the pre-launch check
    says is available), profile the baseline (unless `bound_by` is given or `profile` is False),
    then search."""
    if not budget_s > 0:
        raise ConfigError(f"budget_s must be > 0 seconds, got {budget_s!r}")
    if not run_s > 0:
        raise ConfigError(f"run_s must be > 0 seconds, got {run_s!r}")
    t0 = time.monotonic()
    memory = plan_memory(baseline, memory_budget_gib)  # a budget the baseline cannot fit: refused
    if bound_by is None and profile:
        bound_by, note = bound_by_of(baseline)
    else:
        note = f"bound by {bound_by} (given)" if bound_by else "not profiled: the listed order"
    weights = launcher().precheck(baseline).get("image_weights")  # kept from the memory plan's check
    options = [(c, r and ("not reachable", f"cannot run here: {r}"))
               for c, r in reachable(baseline, weights)]
    options += [(c, r and ("memory budget", f"skipped: {r}")) for c, r in memory.options]
    tried = [c for c, r in options if not r]
    skipped = [(c, r) for c, r in options if r]
    measure = RealMeasure(baseline, run_s, on_run, stop)
    spent = time.monotonic() - t0
    result = search(order(tried, bound_by), measure,
                    budget_s=max(budget_s - spent, 1.0), on_decision=on_decision)
    decisions = result.decisions + [Decision(c.key, False, why, outcome, settings=dict(c.settings))
                                    for c, (why, outcome) in skipped]
    return TuneReport(baseline, baseline.replace(**result.settings) if result.settings else baseline,
                      result.settings, decisions, bound_by, note, time.monotonic() - t0, budget_s,
                      memory.budget_gib, memory.note)
