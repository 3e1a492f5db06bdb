"""The tune search proven on a simulated device with known true speedups (tests/tune_sim.py):
over 200 seeded trials it finds the truly best reachable config, keeps a setting below the
minimum effect rarely, and its reported intervals cover the true ratios; busy rounds are repeated,
not trusted; a setting that moves the loss is dropped; the budget holds; the order follows the
profile's verdict."""

from __future__ import annotations

import random
import re

from tune_sim import SimulatedDevice
from workbench.measure.verdict import MIN_EFFECT
from workbench.trials.changes import Change
from workbench.tune.search import compare, order, search

KINDS = ["loader", "precision", "compile", "layout", "optimizer", "memory", "batch"]
NUMBERS = {"precision", "compile", "memory", "batch"}  # kinds that change the numbers: loss-checked
CANDIDATES = [Change(f"s{i}", {f"field{i}": True}, kind, kind in NUMBERS) for i, kind in enumerate(KINDS)]
COMPILE_S = {"s2": 30.0}  # the compile candidate's one-off compile
# True effects a setting can have: clearly slower, slower, too small to matter, clear gains.
EFFECTS = [0.6, 0.9, 0.98, 1.0, 1.02, 1.04, 1.3, 1.5, 2.0]
TRIALS = 200


def _trial(seed: int, busy: float = 0.0):
    rng = random.Random(seed)
    effects = {c.key: rng.choice(EFFECTS) for c in CANDIDATES}
    sim = SimulatedDevice(CANDIDATES, effects, seed, busy=busy, compile_s=COMPILE_S)
    result = search(order(CANDIDATES, rng.choice([None, "data", "compute"])), sim, budget_s=10**6)
    return effects, result


def _calibration(busy: float) -> dict:
    best = below = covered = intervals = 0
    for seed in range(TRIALS):
        effects, result = _trial(seed, busy)
        kept = {d.setting for d in result.decisions if d.kept}
        best += kept == {k for k, e in effects.items() if e > 1 + MIN_EFFECT}
        below += any(effects[k] < 1 + MIN_EFFECT for k in kept)
        for d in result.decisions:
            if d.low is not None:
                intervals += 1
                covered += d.low <= effects[d.setting] <= d.high
    return {"best": best / TRIALS, "below": below / TRIALS, "coverage": covered / intervals}


def test_calibration_on_a_quiet_simulated_device():
    c = _calibration(busy=0.0)
    assert c["best"] >= 0.95 and c["below"] <= 0.05 and c["coverage"] >= 0.93, c


def test_calibration_holds_when_a_quarter_of_the_rounds_are_busy():
    """Busy rounds collapse one side by 2-20x: trusted, they would decide at random."""
    c = _calibration(busy=0.25)
    assert c["best"] >= 0.95 and c["below"] <= 0.05 and c["coverage"] >= 0.93, c


def test_a_clear_loss_stops_at_the_first_round_that_can_decide_and_busy_rounds_are_counted():
    sim = SimulatedDevice(CANDIDATES, {c.key: 0.6 for c in CANDIDATES}, 1, busy=0.3)
    d = compare(sim, {}, CANDIDATES[0].settings)
    assert not d.kept and d.outcome == "slower" and d.rounds == 7  # the fewest for a one-sided 99 %
    assert d.dropped_pairs > 0 and d.high < 1


def test_a_faster_setting_that_moves_the_loss_is_dropped_and_says_how_far():
    effects = {c.key: 1.0 for c in CANDIDATES} | {"s1": 1.5}
    sim = SimulatedDevice(CANDIDATES, effects, 2, loss_moves={"s1": 0.1})
    bf16 = Change("s1", {"field1": True}, "precision", changes_numbers=True)
    result = search([(bf16, "first")], sim, budget_s=10**6)
    (d,) = result.decisions
    assert not d.kept and d.low > 1 + MIN_EFFECT and result.settings == {}
    assert d.outcome.startswith("faster, but its loss moved: moved 10.")


def test_the_budget_holds_and_what_it_left_out_is_named():
    sim = SimulatedDevice(CANDIDATES, {c.key: 1.0 for c in CANDIDATES}, 3)
    result = search(order(CANDIDATES, None), sim, budget_s=120)
    tried = [d for d in result.decisions if d.rounds]
    assert tried and len(tried) < len(CANDIDATES)
    assert all(
        re.match(r"not measured: the \d+ s left cannot hold the 7 rounds", d.outcome)
        for d in result.decisions[len(tried) :]
    )
    # no round starts that the budget left cannot hold at the pace seen so far: the tune ends
    # within its budget (a round slower than the pace may still overrun it by its difference)
    assert result.spent_s <= 120, result.spent_s


def test_a_comparison_whose_every_pair_was_dropped_is_not_measured_and_says_so():
    """A machine whose load changes inside every pair the budget holds (a busy CI run)."""
    sim = SimulatedDevice(CANDIDATES, {c.key: 1.5 for c in CANDIDATES}, 4, busy=1.0)
    d = compare(sim, {}, CANDIDATES[0].settings, deadline=sim.clock() + 20)
    assert d.rounds == 0 and d.dropped_pairs > 0 and d.status == "not measured" and not d.kept
    assert d.outcome.startswith("undecided when the budget ran out, after 0 pairs")
    assert f"and {d.dropped_pairs} dropped (the load of other programs changed in them)" in d.outcome


def test_the_order_follows_what_bounds_the_step():
    data = [c.key for c, _ in order(CANDIDATES, "data")]
    assert data[0] == "s0" and data[1:] == ["s1", "s2", "s3", "s4", "s5", "s6"]  # the loader first
    compute = order(CANDIDATES, "compute")
    assert [c.kind for c, _ in compute][:3] == ["precision", "compile", "layout"]
    assert compute[0][1] == "bound by compute: precision and compile and layout first"
    assert order(CANDIDATES, None)[0][1].startswith("in the listed order")


def test_every_verdict_of_the_profile_has_an_order():
    from workbench.profile.bound_by import GROUPS
    from workbench.tune.search import FIRST

    assert set(FIRST) == set(GROUPS)


def test_a_compile_is_charged_to_the_budget_and_skipped_when_its_rounds_cannot_fit():
    compiled = CANDIDATES[2]
    effects = {c.key: 1.0 for c in CANDIDATES} | {"s2": 1.5}
    # room for the compile and its rounds: the compile's 30 s are spent, then it is kept
    sim = SimulatedDevice(CANDIDATES, effects, 4, compile_s=COMPILE_S)
    result = search([(compiled, "first")], sim, budget_s=600)
    (d,) = result.decisions
    assert d.kept and d.rounds >= 7 and result.spent_s >= 30 + d.rounds * 2 * 2.0
    # a budget that holds the compile but not the 7 rounds that can decide after it
    sim = SimulatedDevice(CANDIDATES, effects, 4, compile_s=COMPILE_S)
    (d,) = search([(compiled, "first")], sim, budget_s=60).decisions
    assert not d.kept and d.rounds == 0
    assert d.outcome.startswith(
        "not measured: compiling took 30 s; the 7 rounds that can decide would take about"
    ), d.outcome
    # after other comparisons, the pace of a round says beforehand that nothing fits
    effects["s0"] = 0.6  # decided in the fewest rounds, which set the pace
    alone = search([(CANDIDATES[0], "first")], SimulatedDevice(CANDIDATES, effects, 4), budget_s=600)
    sim = SimulatedDevice(CANDIDATES, effects, 4, compile_s=COMPILE_S)
    result = search([(CANDIDATES[0], "first"), (compiled, "then")], sim, budget_s=alone.spent_s + 20)
    assert result.decisions[0].rounds == 7
    assert re.fullmatch(
        r"not measured: the \d+ s left cannot hold the 7 rounds that can decide "
        r"\(about \d+ s at [\d.]+ s a round so far\)",
        result.decisions[1].outcome,
    )
    assert sim.compiled == set()  # not compiled: nothing was spent on it


def test_a_compile_that_outruns_the_budget_is_stopped_and_said():
    sim = SimulatedDevice(CANDIDATES, {c.key: 1.0 for c in CANDIDATES}, 5, compile_s={"s2": 500.0})
    (d,) = search([(CANDIDATES[2], "first")], sim, budget_s=300).decisions
    assert d.outcome == "not measured: compiling: did not finish in 300 s" and not d.kept


def test_a_needed_setting_goes_first_and_is_kept_though_slower_unless_its_loss_moves():
    needed = Change("s5", {"field5": True}, "memory", True, needed="the baseline does not fit")
    cands = [CANDIDATES[0], needed]
    assert [c.key for c, _ in order(cands, "data")] == ["s5", "s0"]
    effects = {c.key: 1.0 for c in CANDIDATES} | {"s5": 0.7}
    d = search(order(cands, "data"), SimulatedDevice(CANDIDATES, effects, 6), budget_s=10**6)
    first = d.decisions[0]
    assert first.kept and first.outcome == "needed: the baseline does not fit (its speed: slower)"
    assert first.high < 1 and first.why == "first: the config needs it" and d.settings == {"field5": True}
    sim = SimulatedDevice(CANDIDATES, effects, 6, loss_moves={"s5": 0.1})
    first = search(order(cands, "data"), sim, budget_s=10**6).decisions[0]
    assert not first.kept and first.outcome.startswith("needed, but its loss moved: moved 10.")


def test_a_decision_that_its_printed_interval_does_not_give_fails_its_claim():
    """Planted: kept with a lower bound under 1 + the minimum effect, 'slower' with an upper bound
    over 1, 'cannot bring the minimum gain' with an upper bound over it."""
    from workbench.tune.search import Decision, follows

    assert follows(Decision("bf16", True, "", "faster by more than 5%", 1.2, 1.08, 1.3, 9))
    assert not follows(Decision("bf16", True, "", "faster by more than 5%", 1.2, 1.02, 1.3, 9))
    assert follows(Decision("fp16", False, "", "slower", 0.8, 0.7, 0.9, 9))
    assert not follows(Decision("fp16", False, "", "slower", 0.9, 0.8, 1.01, 9))
    assert not follows(Decision("x", False, "", "cannot bring the minimum gain of 5%", 1.0, 0.9, 1.08, 9))
