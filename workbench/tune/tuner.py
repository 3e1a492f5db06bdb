"""Tune a config on this machine: what bounds its step (a profiling run), then the search
(workbench.tune.search) over the settings this machine and model can run, each comparison a trial
of the engine (workbench.trials): the best so far and the candidate built once in warm processes,
their steps alternating in short slices, a round one pair; and the recommended config with reasons.

    report = tune(RunConfig.default().with_model("mynet.py:build"), budget_s=600)
    report.config          # the recommended RunConfig
    report.as_dict()       # {"config", "decisions": [{setting, status, kept, ratio, low, high,
                           #   rounds, dropped_pairs, conditions, loss_check, why, ...}], ...}
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from ..config import ConfigError, RunConfig
from ..hardware.lessons import reasons
from ..distributed.launch import launcher
from ..trials.engine import SLICE_S, Slice, Trial
from ..trials.hosts import TrainingHosts, TrialError
from .candidates import NOT_TRIED, reachable
from .memory_candidates import plan_memory
from .search import DECIDE_CONFIDENCE, Decision, LossCheck, Prepared, Round, order, search

# How far the mean loss over the same samples seen may move, relative: for bf16, fp16 and compile
# the same steps; for a larger batch fewer, larger steps over the same data, so a batch that learns
# less per sample at the same learning rate shows it here and is dropped (scaling the learning rate
# with the batch is a change of recipe, left to the user).
LOSS_TOLERANCE = 0.05


def _key(settings: dict) -> str:
    """A variant's label: its settings on top of the baseline."""
    return ",".join(f"{k}={v!r}" for k, v in sorted(settings.items())) or "baseline"


class TrialMeasure:
    """The search's rounds as pairs of slices (workbench.trials.engine): every config tried is built
    once in a warm host process (the same seed: the same initial weights and data), the best and
    the candidate alternate slice by slice, and a pair is dropped only when the load of other
    programs changed inside it. Variants that lost are let go, so memory holds the best and the
    candidate."""

    def __init__(
        self,
        baseline: RunConfig,
        slice_s: float = SLICE_S,
        on_slice: Callable[[Slice], None] | None = None,
        stop: Callable[[], bool] | None = None,
        folder=None,
    ):
        self.baseline = baseline.replace(**{"run.eval_batches": 0, "run.save_weights": False})
        self.slice_s, self.on_slice, self.stop = slice_s, on_slice, stop
        self.hosts = TrainingHosts(self.baseline, folder)
        self.trials: dict[tuple[str, str], Trial] = {}
        self.losses: dict[str, list[float]] = {}  # label -> every step's loss from its first
        self.compile_s = 0.0  # the longest build of a compiled variant so far

    def config(self, settings: dict) -> RunConfig:
        return self.baseline.replace(**settings) if settings else self.baseline

    def refusal(self, candidate: dict) -> str | None:
        """What this machine cannot run (the launch's rule), or a config the settings make invalid."""
        try:
            return self.hosts.refusal(self.config(candidate))
        except ConfigError as e:
            return str(e)

    def _built(self, settings: dict) -> str:
        label = _key(settings)
        if label not in self.hosts.variants:
            built = self.hosts.add(label, self.config(settings))
            self.losses[label] = list(built["losses"])
        return label

    def _heard(self, s: Slice) -> None:
        self.losses[s.label].extend(s.losses)
        self.hosts.record(s)
        if self.on_slice is not None:
            self.on_slice(s)

    def _trial(self, best: dict, candidate: dict) -> Trial:
        a, b = self._built(best), self._built(candidate)
        if (a, b) not in self.trials:
            for label in list(self.hosts.variants):  # the losers so far: free their memory
                if label not in (a, b):
                    self.hosts.drop(label)
            self.trials[(a, b)] = Trial(self.hosts.of([a, b]), a, slice_s=self.slice_s, on_slice=self._heard)
        return self.trials[(a, b)]

    def round(self, best: dict, candidate: dict) -> Round:
        if self.stop is not None and self.stop():
            return Round(None, failed="stopped by the user")
        try:
            trial = self._trial(best, candidate)
            trial.round()
        except TrialError as e:
            return Round(None, failed=str(e))
        ratio = trial.pair_ratio(_key(candidate))
        return Round(ratio, dropped=ratio is None)

    def conditions(self, best: dict, candidate: dict) -> str:
        trial = self.trials.get((_key(best), _key(candidate)))
        return trial.compare(_key(candidate)).conditions if trial else ""

    def _per_step(self, settings: dict) -> int:
        cfg = self.config(settings)
        return cfg.loader.batch_size * cfg.optim.grad_accum_steps * cfg.distributed.world_size

    def loss_check(self, best: dict, candidate: dict) -> LossCheck:
        """The mean loss over the samples both variants saw from their first step (same seed: the
        same data and start; the same steps when the batch is the same), candidate against best."""
        per = self._per_step(best), self._per_step(candidate)
        la, lb = self.losses.get(_key(best), []), self.losses.get(_key(candidate), [])
        common = min(len(la) * per[0], len(lb) * per[1])
        na, nb = common // per[0], common // per[1]
        if min(na, nb) < 5:
            return LossCheck(False, float("inf"), "too few steps in common to compare the losses")
        ma, mb = statistics.fmean(la[:na]), statistics.fmean(lb[:nb])
        moved = abs(mb - ma) / abs(ma) if ma else float("inf")
        over = (
            f"the same {min(na, nb)} steps"
            if per[0] == per[1]
            else f"the same {common:,} samples seen (batch {per[1]} against {per[0]} a step)"
        )
        return LossCheck(
            moved <= LOSS_TOLERANCE,
            moved,
            f"mean loss moved {moved:.1%} over {over} (tolerance {LOSS_TOLERANCE:.0%})",
        )

    def one_off(self, best: dict, candidate: dict) -> str | None:
        compiles = self.config(candidate).compile.enabled
        return "compiling" if compiles and _key(candidate) not in self.hosts.variants else None

    def prepare(self, best: dict, candidate: dict, timeout_s: float) -> Prepared:
        """Build the compiled variant (its first steps compile it), outside every timing; a round
        is then about two slices. A build cannot be cut short, so one is not started when an
        earlier compile took longer than the `timeout_s` left for it."""
        if self.compile_s > timeout_s:
            return Prepared(
                0.0,
                failed=f"the last compile took {self.compile_s:.0f} s and "
                f"{max(timeout_s, 0):.0f} s are left for this one",
            )
        t0 = time.monotonic()
        try:
            self._built(best)
            self._built(candidate)
        except TrialError as e:
            return Prepared(time.monotonic() - t0, failed=str(e))
        took = time.monotonic() - t0
        self.compile_s = max(self.compile_s, took)
        return Prepared(took, 2 * self.slice_s + 0.1)

    def clock(self) -> float:
        return time.monotonic()

    def matmuls(self) -> list[dict]:
        """The baseline's matrix products (built here, as its first comparison needs it): what the
        precision rows' reason places on this machine's size curve."""
        try:
            label = self._built({})
            return self.hosts.variants[label].matmuls(label)
        except TrialError:
            return []

    def close(self) -> None:
        self.hosts.close()


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
    precision_why: dict = field(default_factory=dict)  # dtype -> why it pays or not for this model

    def precision_lines(self) -> list[str]:
        """The precision lesson of this model as the tune measured it: each 16-bit row's decision
        with the interval it was made on, and the reason from the model's matmuls on this machine's
        size curve (workbench.hardware.lessons)."""
        out = []
        for d in self.decisions:
            dtype = d.settings.get("precision.dtype")
            if dtype not in self.precision_why:
                continue
            measured = f"{d.status}, {d.interval_text()}" if d.ratio is not None else d.status
            out.append(f"precision lesson for this model: {dtype} {measured}")
            if self.precision_why[dtype]:
                out.append(f"  why: {self.precision_why[dtype]}")
        return out

    def as_dict(self) -> dict:
        return {
            "config": self.config.to_dict(),
            "settings": self.settings,
            "decisions": [d.as_dict() for d in self.decisions],
            "bound_by": self.bound_by,
            "bound_by_note": self.bound_by_note,
            "spent_s": round(self.spent_s, 1),
            "budget_s": self.budget_s,
            "memory_budget_gib": self.memory_budget_gib,
            "memory_note": self.memory_note,
            "not_tried": self.not_tried,
            "precision_why": self.precision_why,
        }

    def text(self) -> str:
        lines = [
            f"tuned in {self.spent_s:.0f} s of {self.budget_s:.0f} s; {self.bound_by_note}",
            self.memory_note,
        ]
        lines.append(
            f"  intervals: {DECIDE_CONFIDENCE:.0%} of the median ratio, each end a one-sided "
            f"{(1 + DECIDE_CONFIDENCE) / 2:.0%} bound: the ones each decision was made on"
        )
        for d in self.decisions:
            ratio = d.interval_text() if d.ratio is not None else ""
            dropped = f", {d.dropped_pairs} dropped" if d.dropped_pairs else ""
            where = f", {d.conditions}" if d.conditions else ""
            loss = f"; {d.loss_check}" if d.loss_check and d.loss_check not in d.outcome else ""
            said = d.outcome.removeprefix(f"{d.status}: ")  # the status leads the line already
            lines.append(f"  {d.status:12s} {d.setting:14s} {ratio}{dropped}{where}: {said}{loss} ({d.why})")
        lines += self.precision_lines()
        kept = ", ".join(f"{k}={v}" for k, v in self.settings.items()) or "nothing: the baseline"
        lines.append(f"recommended: {kept}")
        lines.append("not tried: " + "; ".join(f"{k} ({v})" for k, v in self.not_tried.items()))
        return "\n".join(lines)


def precision_ratios(decisions: list[Decision]) -> dict:
    """dtype -> what the tune measured of it (a Ratio), for the precision rows' reason."""
    from ..measure.ratios import Ratio
    from ..measure.verdict import verdict

    return {
        d.settings["precision.dtype"]: Ratio(
            d.ratio, d.low, d.high, d.rounds, verdict(d.ratio, (d.low, d.high))
        )
        for d in decisions
        if d.settings.get("precision.dtype") and d.ratio is not None and d.low is not None
    }


def bound_by_of(baseline: RunConfig) -> tuple[str | None, str]:
    """What bounds the baseline's step, from a profiling run (workbench.profile)."""
    from ..profile.profiled_run import profile

    try:
        b = profile(baseline)
    except ConfigError as e:
        return None, f"no profile ({e}): the listed order"
    return b.verdict.bound_by, f"bound by {b.verdict.bound_by}: {b.verdict.reason}"


def tune(
    baseline: RunConfig,
    *,
    budget_s: float = 600.0,
    slice_s: float = SLICE_S,
    bound_by: str | None = None,
    profile: bool = True,
    memory_budget_gib: float | None = None,
    on_decision: Callable[[Decision], None] | None = None,
    on_slice: Callable[[Slice], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> TuneReport:
    """Plan the memory candidates within `memory_budget_gib` a rank (None: what the pre-launch check
    says is available), profile the baseline (unless `bound_by` is given or `profile` is False),
    then search.

    :param baseline: the config to tune; the recommended config is it with the settings kept.
    :param budget_s: seconds the whole tune may take, the profile included; the search gets what is
        left, at least 1 s.
    :param slice_s: seconds of training steps in each slice of a comparison.
    :param bound_by: what bounds the step ("data", "compute", "communication", "optimizer" or
        "framework overhead"), which orders the candidates; None: read from a profiling run.
    :param profile: profile the baseline when `bound_by` is not given; False: the candidates are tried
        in the listed order.
    :param memory_budget_gib: GiB one rank may hold, for the batch and checkpointing candidates; None:
        what the pre-launch check reads as available.
    :param on_decision: called with each decision the search makes; None: nothing is called.
    :param on_slice: called with each slice measured, warm-up slices included; None: nothing is called.
    :param stop: asked before each round; True ends every comparison from then on as stopped by the
        user. None: the tune goes on until its budget or its candidates are spent.
    """
    if not budget_s > 0:
        raise ConfigError(f"budget_s must be > 0 seconds, got {budget_s!r}")
    if not slice_s > 0:
        raise ConfigError(f"slice_s must be > 0 seconds, got {slice_s!r}")
    t0 = time.monotonic()
    memory = plan_memory(baseline, memory_budget_gib)  # a budget the baseline cannot fit: refused
    if bound_by is None and profile:
        bound_by, note = bound_by_of(baseline)
    else:
        note = f"bound by {bound_by} (given)" if bound_by else "not profiled: the listed order"
    weights = launcher().precheck(baseline).get("image_weights")  # kept from the memory plan's check
    options = [
        (c, r and ("not reachable", f"not measured: this machine cannot run it: {r}"))
        for c, r in reachable(baseline, weights)
    ]
    options += [(c, r and ("memory budget", f"not measured: {r}")) for c, r in memory.options]
    tried = [c for c, r in options if not r]
    skipped = [(c, r) for c, r in options if r]
    measure = TrialMeasure(baseline, slice_s, on_slice, stop)
    try:
        matmuls = measure.matmuls() if any(c.kind == "precision" for c in tried) else []
        spent = time.monotonic() - t0
        result = search(
            order(tried, bound_by), measure, budget_s=max(budget_s - spent, 1.0), on_decision=on_decision
        )
    finally:
        measure.close()
    decisions = result.decisions + [
        Decision(c.key, False, why, outcome, settings=dict(c.settings)) for c, (why, outcome) in skipped
    ]
    return TuneReport(
        baseline,
        baseline.replace(**result.settings) if result.settings else baseline,
        result.settings,
        decisions,
        bound_by,
        note,
        time.monotonic() - t0,
        budget_s,
        memory.budget_gib,
        memory.note,
        precision_why=(
            # once asked to stop, only a size curve kept already gives the reason: none is measured
            reasons(baseline, matmuls, precision_ratios(result.decisions), not (stop and stop()))
            if matmuls
            else {}
        ),
    )
