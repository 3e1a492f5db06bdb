"""How the warm host splits a slice among its variants: the same turns for every variant and, on
average, the same seconds in each, whatever their pace."""

from __future__ import annotations

import math
from types import SimpleNamespace

from workbench.train.host import CHUNK_S, plan, steps_in_turn


def test_steps_a_turn_keep_the_average_and_add_up_to_the_slice():
    for per_turn in (0.2, 1.0, 1.5, 4.44, 4.65, 7.0):
        steps = [steps_in_turn(per_turn, t) for t in range(15)]
        assert sum(steps) == math.floor(15 * per_turn)
        assert max(steps) - min(steps) <= 1  # spread evenly, never bunched


def test_variants_of_different_pace_get_the_same_turns_and_seconds_in_them():
    fast, slow = SimpleNamespace(step_s=0.0045), SimpleNamespace(step_s=0.0043)
    how = plan([fast, slow], 0.3)
    assert how["turns"] == round(0.3 / CHUNK_S)
    for v, per_turn in zip((fast, slow), how["per_turn"]):
        seconds = sum(steps_in_turn(per_turn, t) for t in range(how["turns"])) * v.step_s
        assert abs(seconds - 0.3) <= v.step_s  # within one step of the slice, both sides alike
