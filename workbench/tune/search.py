"""The tune search: one setting at a time against the best config so far, each comparison in
interleaved rounds that stop as soon as an interval decides, within a time budget.

    result = search(order(candidates, bound_by="compute"), measure, budget_s=600)
    result.settings        # the kept settings, dotted config fields -> values
    result.decisions       # one Decision a candidate: kept or not, ratio [low, high], rounds, why

Pure: a `Measure` runs the rounds (real runs of the config, or a simulated device with known true
speedups in the calibration tests) and reads the clock, so what is proven on the simulation is the
code that runs on the machine.

How a comparison decides. Each round gives the candidate's speed over the best's, the two run side
by side. After every round the median ratio's distribution-free interval is read at 98 %, each of
its ends a one-sided 99 % bound, stricter than the 95 % of a single comparison: the comparison looks
many times, and each look is a chance to be fooled. That interval is the one a decision prints.
Each decision needs only its own side:
- kept when the lower bound lies above 1 + the minimum effect: faster by more than it is worth;
- dropped early when the upper bound lies below 1 + the minimum effect: it cannot bring that gain;
- dropped as undecided after `max_rounds`, or when the budget left cannot hold another round.
A round is one pair of neighbouring slices (workbench.trials.engine): a busy pair is kept, as both
sides shared the load of its moment; a pair the measure drops (the load changed inside it) is
repeated, and the decision says how many were. A candidate that changes the numbers (bf16, fp16, compile,
activation checkpointing, a larger batch) is kept only when its loss stays within the measure's
tolerance of the best's; the decision says how far it moved.

A candidate with one-off work before its rounds (compile: the first compiled run fills the compile
cache) is charged for it from the same budget, and skipped after it when the measure's estimate of
its rounds no longer fits. No candidate is tried when the budget left cannot hold the fewest rounds
that can decide, at the pace of a round seen so far; no round starts that the budget left cannot
hold, so a tune ends within its budget, give or take how far a round strays from that pace. A
candidate the config needs (activation checkpointing when the baseline does not fit the memory
budget) is measured as any other, so its cost is known, and kept whatever its speed if its loss
stays close.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable, Protocol

from ..measure import claims
from ..measure.ratios import median_interval, min_rounds
from ..measure.verdict import MIN_EFFECT
from ..trials.changes import Change

# Each look's interval: its ends are one-sided 99 % bounds, and a decision reads only one of them
# (a two-sided 99 % interval made every decision wait for an 8th round, with no gain in calibration).
DECIDE_CONFIDENCE = 0.98
MAX_ROUNDS = 20  # an undecided comparison gives up here: the gain, if any, is too small to see
MAX_DROPPED = 10  # dropped pairs repeated per comparison before it gives up
FEWEST = min_rounds(DECIDE_CONFIDENCE)  # rounds before any decision can be made (7)

# What to try first, by what the profile says bounds the step (workbench.profile.bound_by).
FIRST = {
    "data": ("loader",),
    "compute": ("precision", "compile", "layout"),
    "communication": ("ranks",),
    "optimizer": ("optimizer",),
    "framework overhead": ("compile", "batch"),
}


@dataclass(frozen=True)
class Round:
    """One round: the candidate's speed over the best's, measured side by side."""

    ratio: float | None  # above 1: the candidate was faster (None when a run failed)
    dropped: bool = False  # the load of other programs changed inside the pair: repeated
    failed: str | None = None  # a run that did not complete: what it said


@dataclass(frozen=True)
class Prepared:
    """One-off work done before a candidate's rounds (compiling), and what it says of the rounds."""

    seconds: float  # what the work took, charged to the budget
    round_s: float = 0.0  # the measure's estimate of one round of this comparison
    failed: str | None = None  # it did not complete: why


@dataclass(frozen=True)
class LossCheck:
    ok: bool
    moved: float  # how far the candidate's loss moved from the best's over the same steps (relative)
    note: str


class Measure(Protocol):
    def refusal(self, candidate: dict) -> str | None:
        """Why this machine cannot run the candidate (what the launch would refuse), or None."""

    def round(self, best: dict, candidate: dict) -> Round:
        """Run both configs once, side by side (settings on top of the baseline)."""

    def loss_check(self, best: dict, candidate: dict) -> LossCheck:
        """Whether the candidate's loss over the same steps stays close to the best's."""

    def one_off(self, best: dict, candidate: dict) -> str | None:
        """What the candidate must do once before its rounds ('compiling'), or None."""

    def prepare(self, best: dict, candidate: dict, timeout_s: float) -> Prepared:
        """Do that one-off work, given at most `timeout_s` seconds."""

    def conditions(self, best: dict, candidate: dict) -> str:
        """Under which load the comparison's pairs ran ('quiet', or what other programs held)."""

    def clock(self) -> float:
        """Seconds, for the budget."""


@dataclass
class Decision:
    """What the search did with one candidate, and why."""

    setting: str
    kept: bool
    why: str  # why it was tried when it was (the order)
    outcome: str  # why it was kept or dropped, in words
    ratio: float | None = None  # median speed over the best so far, with the interval that decides
    # (DECIDE_CONFIDENCE: each end a one-sided 99 % bound; None before FEWEST pairs)
    low: float | None = None
    high: float | None = None
    rounds: int = 0  # pairs used
    dropped_pairs: int = 0
    conditions: str = ""  # quiet, or how much other programs held while it was measured
    loss_check: str | None = None  # for a setting that changes the numbers: how far the loss moved
    ratios: list = field(default_factory=list, repr=False)
    settings: dict = field(default_factory=dict)  # the config fields it sets ({"loader.batch_size": 256})

    def interval_text(self) -> str:
        """'1.13x [1.04, 1.22] over 9 pairs', the interval the decision was made on."""
        if self.ratio is None:
            return self.outcome
        interval = f" [{self.low:.2f}, {self.high:.2f}]" if self.low is not None else ""
        return f"{self.ratio:.2f}x{interval} over {self.rounds} pairs"

    @property
    def status(self) -> str:
        """kept, dropped, undecided (with the pairs it got), or not measured (with why)."""
        if self.kept:
            return "kept"
        if not self.rounds:
            return "not measured"
        return "undecided" if self.outcome.startswith("undecided") else "dropped"

    def as_dict(self) -> dict:
        r = lambda v: None if v is None else round(v, 4)  # noqa: E731
        return {
            "setting": self.setting,
            "settings": self.settings,
            "kept": self.kept,
            "status": self.status,
            "ratio": r(self.ratio),
            "low": r(self.low),
            "high": r(self.high),
            "rounds": self.rounds,
            "dropped_pairs": self.dropped_pairs,
            "conditions": self.conditions,
            "loss_check": self.loss_check,
            "why": self.why,
            "outcome": self.outcome,
        }


@dataclass
class TuneResult:
    settings: dict  # the kept settings, on top of the baseline
    decisions: list[Decision]
    spent_s: float


def follows(d: Decision, min_effect: float = MIN_EFFECT) -> bool:
    """Whether a decision follows from the interval it prints, by the rule that decides: kept only
    above 1 + the minimum effect, 'slower' only below 1, 'cannot bring the minimum gain' only
    below 1 + the minimum effect."""
    if d.kept:
        return d.low is not None and d.low > 1 + min_effect
    if d.outcome == "slower":
        return d.high is not None and d.high < 1
    if d.outcome.startswith("cannot bring"):
        return d.high is not None and d.high < 1 + min_effect
    return True


def order(candidates: list[Change], bound_by: str | None) -> list[tuple[Change, str]]:
    """The candidates in the order to try them, each with why there: what the config needs first,
    then the kinds the profile's "bound by" verdict points at, then the rest as listed."""
    needed = [(c, "first: the config needs it") for c in candidates if c.needed]
    candidates = [c for c in candidates if not c.needed]
    first = FIRST.get(bound_by or "", ())
    lead = sorted((c for c in candidates if c.kind in first), key=lambda c: first.index(c.kind))
    rest = [c for c in candidates if c.kind not in first]
    kinds = [k for k in first if any(c.kind == k for c in lead)]  # only what is there to try
    why_lead = f"bound by {bound_by}: {' and '.join(kinds)} first"
    why_rest = (
        f"after what the 'bound by {bound_by}' verdict puts first"
        if lead
        else "in the listed order (no profile verdict to order by)"
    )
    return needed + [(c, why_lead) for c in lead] + [(c, why_rest) for c in rest]


def compare(
    measure: Measure,
    best: dict,
    trial: dict,
    *,
    min_effect: float = MIN_EFFECT,
    max_rounds: int = MAX_ROUNDS,
    deadline: float = float("inf"),
    round_s: float = 0.0,
) -> Decision:
    """Rounds of the trial against the best until a one-sided 99 % bound decides (the module). A
    round starts only when the budget left holds it: at this comparison's pace once it has one,
    else at `round_s` (the pace seen so far)."""
    ratios: list[float] = []
    dropped = 0
    outcome = f"undecided after {max_rounds} pairs: any gain is below what they can show"
    faster = False
    t0 = measure.clock()
    while len(ratios) < max_rounds:
        done = len(ratios) + dropped
        pace = (measure.clock() - t0) / done if done else round_s
        if measure.clock() + pace > deadline:
            lost = f" and {dropped} dropped (the load of other programs changed in them)" if dropped else ""
            outcome = (
                f"undecided when the budget ran out, after {len(ratios)} pairs{lost} (another "
                f"would take about {pace:.0f} s)"
            )
            break
        r = measure.round(best, trial)
        if r.failed:
            outcome = f"ended: {r.failed}"
            break
        if r.dropped:
            dropped += 1
            if dropped > MAX_DROPPED:
                outcome = (
                    f"undecided after {len(ratios)} pairs: {dropped} more were dropped, the "
                    "load of other programs changing inside them"
                )
                break
            continue
        ratios.append(r.ratio)
        decide = median_interval(ratios, DECIDE_CONFIDENCE)
        if decide is None:
            continue
        if decide[0] > 1 + min_effect:
            faster, outcome = True, f"faster by more than {min_effect:.0%}"
            break
        if decide[1] < 1 + min_effect:
            outcome = "slower" if decide[1] < 1 else f"cannot bring the minimum gain of {min_effect:.0%}"
            break
    shown = median_interval(ratios, DECIDE_CONFIDENCE)  # the interval that decided, and is printed
    return Decision(
        setting="",
        kept=faster,
        why="",
        outcome=outcome,
        ratio=statistics.median(ratios) if ratios else None,
        low=shown[0] if shown else None,
        high=shown[1] if shown else None,
        rounds=len(ratios),
        dropped_pairs=dropped,
        ratios=ratios,
        conditions=measure.conditions(best, trial) if ratios else "",
    )


def search(
    ordered: list[tuple[Change, str]],
    measure: Measure,
    *,
    budget_s: float,
    min_effect: float = MIN_EFFECT,
    max_rounds: int = MAX_ROUNDS,
    on_decision: Callable[[Decision], None] | None = None,
) -> TuneResult:
    """Try each candidate in order against the best so far; keep what decides faster (and keeps
    its loss); stop trying when the budget is spent. `on_decision` hears each decision made."""
    start = measure.clock()
    deadline = start + budget_s
    best: dict = {}
    decisions: list[Decision] = []
    paced = [0.0, 0]  # seconds and rounds of the comparisons so far: the pace of a round

    def decided(d: Decision) -> None:
        d.settings = dict(cand.settings)
        decisions.append(d)
        claims.record(
            "the tune", "verdict", f"{cand.key}: {d.status}", follows(d, min_effect), d.interval_text()
        )
        if on_decision is not None:
            on_decision(d)

    for cand, why in ordered:
        trial = {**best, **cand.settings}
        if trial == best:
            decided(Decision(cand.key, False, why, "already part of the best config"))
            continue
        pace = paced[0] / paced[1] if paced[1] else 0.0  # seconds a round, so far
        left = deadline - measure.clock()
        if left <= FEWEST * pace:
            decided(
                Decision(
                    cand.key,
                    False,
                    why,
                    f"not measured: the {left:.0f} s left cannot hold "
                    f"the {FEWEST} rounds that can decide (about {FEWEST * pace:.0f} s at "
                    f"{pace:.1f} s a round so far)",
                )
            )
            continue
        refused = measure.refusal(trial)
        if refused:
            decided(
                Decision(
                    cand.key,
                    False,
                    why,
                    f"not measured: the launch refuses it with what was kept before it: {refused}",
                )
            )
            continue
        work = measure.one_off(best, trial)
        if work:
            short = _prepared(measure, best, trial, work, deadline, pace)
            if short:
                decided(Decision(cand.key, False, why, f"not measured: {short}"))
                continue
        t0 = measure.clock()
        d = compare(
            measure,
            best,
            trial,
            min_effect=min_effect,
            max_rounds=max_rounds,
            deadline=deadline,
            round_s=pace,
        )
        paced[0] += measure.clock() - t0
        paced[1] += d.rounds + d.dropped_pairs
        d.setting, d.why = cand.key, why
        if cand.needed and d.rounds:
            d.kept, d.outcome = True, f"needed: {cand.needed} (its speed: {d.outcome})"
        if d.kept and cand.changes_numbers:
            check = measure.loss_check(best, trial)
            d.loss_check = check.note
            if not check.ok:
                d.kept = False
                d.outcome = (
                    f"needed, but its loss moved: {check.note}"
                    if cand.needed
                    else f"faster, but its loss moved: {check.note}"
                )
        if d.kept:
            best = trial
        decided(d)
    return TuneResult(best, decisions, measure.clock() - start)


def _prepared(
    measure: Measure, best: dict, trial: dict, work: str, deadline: float, round_s: float
) -> str | None:
    """Do a candidate's one-off work, given what the budget left holds beside the fewest rounds
    that can decide (the search has checked that they fit); when the rounds no longer fit after
    it, why not (the module)."""
    left = deadline - measure.clock()
    p = measure.prepare(best, trial, left - FEWEST * round_s)
    if p.failed:
        return f"{work}: {p.failed}"
    left = deadline - measure.clock()
    if FEWEST * p.round_s > left:
        return (
            f"{work} took {p.seconds:.0f} s; the {FEWEST} rounds that can decide would take "
            f"about {FEWEST * p.round_s:.0f} s ({p.round_s:.1f} s a round) and "
            f"{max(left, 0):.0f} s are left"
        )
    return None
