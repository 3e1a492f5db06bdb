"""Each kind of false page a reader once found, planted, and the claims check that must fail on
it: the check recomputes what the page says (the verdict rule on the printed interval, a product, a
prediction's miss, a verdict against the accuracy kept, one answer per question, a plan against what
ran, a value where one is required), so a filled table or a reason attached is never enough. Each
honest twin passes, so the failure is the falsehood's, not the check's."""

from __future__ import annotations

import pytest

from workbench.measure import claims
from workbench.ui.table import html_table

KEPT = {"step": "+ bf16", "status": "faster", "kept": True, "gain_vs_prev": 1.5}
BASE = {"step": "baseline", "status": "baseline", "kept": True, "gain_vs_prev": 1.0}


def _total(product: float, note_product: float) -> dict:
    from workbench.stacking.study import TOTAL

    return {
        "step": TOTAL,
        "status": "faster",
        "kept": None,
        "gain_vs_prev": None,
        "gain_vs_baseline": product,
        "gain_low": 1.4,
        "gain_high": 1.6,
        "note": f"the kept steps' product, {note_product:.2f}x, lies inside this interval",
    }


def _stacked(gains: list[float], product: float, note_product: float) -> None:
    from workbench.stacking.study import total_claim

    total_claim(
        [BASE, *({**KEPT, "step": f"+ {g}", "gain_vs_prev": g} for g in gains), _total(product, note_product)]
    )


PAGES = {
    # 01/07: "foreach 0.92x [0.81, 0.98] ... slower" where the rule needs the median 5 % past 1
    "a verdict the printed interval does not give": (
        lambda: claims.verdict("optimizers", "slower", 0.96, (0.81, 0.98)),
        lambda: claims.verdict("optimizers", "within noise", 0.96, (0.81, 0.98)),
    ),
    # 03: "1.88x within noise" with no interval at all
    "a verdict without an interval": (
        lambda: claims.verdict("structured sweep", "within noise", 1.88, None),
        lambda: claims.verdict("structured sweep", "undecided", 1.88, None),
    ),
    # 06: "the waterfall's steps add up to the total", 0.55 x 1.06 x 0.82 = 0.48 shown as 0.39
    "a total that is not its steps' product": (
        lambda: _stacked([1.5, 1.2], 1.5, 1.5),
        lambda: _stacked([1.2, 1.25], 1.5, 1.5),
    ),
    # 06: a sentence that names another product than the total it stands beside
    "a total whose sentence names another product": (
        lambda: _stacked([1.5], 1.5, 1.39),
        lambda: _stacked([1.5], 1.5, 1.5),
    ),
    # 06: "+ 2 DDP ranks: True" in the plan, the workers run instead
    "a plan that is not what ran": (
        lambda: claims.plan(
            "stacking plan", {"ddp": True, "workers": False}, {"ddp": False, "workers": True}
        ),
        lambda: claims.plan(
            "stacking plan", {"ddp": True, "workers": False}, {"ddp": True, "workers": False}
        ),
    ),
    # 02/07: a peak 56 % off its prediction, a reason attached
    "a prediction outside its tolerance with a reason": (
        lambda: claims.prediction("memory", "peak", 615, 1414, 0.15, reason="the allocator keeps memory"),
        lambda: claims.prediction("memory", "peak", 615, 650, 0.15),
    ),
    # 03: "faster" shown for a variant whose accuracy fell 0.977 -> 0.744
    "a clean gain that cost accuracy": (
        lambda: html_table(
            [{"variant": "structured 50%", "verdict": "faster", "dense_accuracy": 0.977, "accuracy": 0.744}],
            ["variant", "verdict"],
        ),
        lambda: html_table(
            [
                {
                    "variant": "structured 50%",
                    "verdict": "faster, but accuracy 0.977 -> 0.744",
                    "dense_accuracy": 0.977,
                    "accuracy": 0.744,
                }
            ],
            ["variant", "verdict"],
        ),
    ),
    # 06: the reproduction's loss column blank on every row, "largest difference: nan"
    "a blank where a value is required": (
        lambda: html_table([{"step": 1, "script_loss": None}], required=("script_loss",)),
        lambda: html_table([{"step": 1, "script_loss": 2.301}], required=("script_loss",)),
    ),
    # any table: a 'nan' a reader would see
    "a placeholder for a value": (
        lambda: html_table([{"variant": "bf16", "speedup": "nanx [nan, nan]"}]),
        lambda: html_table([{"variant": "bf16", "speedup": "1.31x [1.18, 1.44]"}]),
    ),
    # 01 against 04 and 07: two precisions to try first under one set of conditions
    "two answers to one question": (
        lambda: (
            claims.same("01", "precision", "quiet", "fp32"),
            claims.same("04", "precision", "quiet", "bf16"),
        ),
        lambda: (
            claims.same("01", "precision", "quiet", "bf16"),
            claims.same("04", "precision", "quiet", "bf16"),
        ),
    ),
}


@pytest.mark.parametrize("kind", list(PAGES))
def test_a_planted_falsehood_fails_the_check_and_its_honest_twin_passes(kind):
    false_page, honest_page = PAGES[kind]
    claims.clear()
    false_page()
    with pytest.raises(claims.ClaimsDisagree):
        claims.check()
    claims.clear()
    honest_page()
    assert claims.check().claims, f"{kind}: the honest page recorded nothing to check"
    claims.clear()
