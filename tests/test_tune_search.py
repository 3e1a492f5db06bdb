"""The tune search proven on a simulated device with known true speedups (tests/tune_sim.py):
over 200 seeded trials it finds the truly best reachable config, keeps a setting below the
minimum effect rarely, and its reported intervals cover the true ratios; busy rounds are repeated,
not trusted; a setting that moves the loss is dropped; the budget holds; the order follows the
profile's verdict."""
from __future__ import annotations

import random

from tune_sim import SimulatedDevice
from workbench.measure.verdict import MIN_EFFECT
from workbench.tune.search import Candidate, compare, order, search

KINDS = ["loader", "precision", "compile", "layout", "optimizer", "memory"]
CANDIDATES = [Candidate(f"s{i}", {f"field{i}": True}, kind) for i, kind in enumerate(KINDS)]
# True effects a setting can have: clearly slower, slower, too small to matter, clear gains.
EFFECTS = [0.6, 0.9, 0.98, 1.0, 1.02, 1.04, 1.3, 1.5, 2.0]
TRIALS = 200


def _trial(seed: int, busy: float = 0.0):
    rng = random.Random(seed)
    effects = {c.key: rng.choice(EFFECTS) for c in CANDIDATES}
    sim = SimulatedDevice(CANDIDATES, effects, seed, busy=busy)
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
    assert d.busy_rounds > 0 and d.high < 1


def test_a_faster_setting_that_moves_the_loss_is_dropped_and_says_how_far():
    effects = {c.key: 1.0 for c in CANDIDATES} | {"s1": 1.5}
    sim = SimulatedDevice(CANDIDATES, effects, 2, loss_moves={"s1": 0.1})
    bf16 = Candidate("s1", {"field1": True}, "precision", changes_numbers=True)
    result = search([(bf16, "first")], sim, budget_s=10**6)
    (d,) = result.decisions
    assert not d.kept and d.low > 1 + MIN_EFFECT and result.settings == {}
    assert d.outcome.startswith("faster, but its loss moved: moved 10.")


def test_the_budget_holds_and_what_it_left_out_is_named():
    sim = SimulatedDevice(CANDIDATES, {c.key: 1.0 for c in CANDIDATES}, 3)
    result = search(order(CANDIDATES, None), sim, budget_s=120)
    tried = [d for d in result.decisions if d.rounds]
    assert tried and len(tried) < len(CANDIDATES)
    assert all(d.outcome == "not tried: the budget was spent" for d in result.decisions[len(tried):])
    # a comparison started before the deadline stops at it; one run more at most overruns it
    assert result.spent_s <= 120 + 2 * (20 * 0.05 * 1.5 + 2.0) * 5


def test_the_order_follows_what_bounds_the_step():
    data = [c.key for c, _ in order(CANDIDATES, "data")]
    assert data[0] == "s0" and data[1:] == ["s1", "s2", "s3", "s4", "s5"]  # the loader first
    compute = order(CANDIDATES, "compute")
    assert [c.kind for c, _ in compute][:3] == ["precision", "compile", "layout"]
    assert compute[0][1] == "bound by compute: precision and compile and layout first"
    assert order(CANDIDATES, None)[0][1].startswith("in the listed order")


def test_every_verdict_of_the_profile_has_an_order():
    from workbench.profile.verdict import GROUPS
    from workbench.tune.search import FIRST

    assert set(FIRST) == set(GROUPS)
