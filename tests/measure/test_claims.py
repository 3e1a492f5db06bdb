"""The claims check: a sentence recorded with its numbers holds or fails by one rule each, and
`check()` names every claim that does not hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.measure import claims
from workbench.measure.ratios import ratio_of

NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("0*.ipynb"))


@pytest.fixture(autouse=True)
def fresh():
    claims.clear()
    yield
    claims.clear()


def test_a_verdict_holds_only_where_its_interval_says_so():
    assert claims.verdict("a", "faster", 1.72, (1.43, 1.91)).holds
    assert claims.verdict("b", "faster, but accuracy 0.995 -> 0.273", 1.62, (1.4, 1.8)).holds
    assert not claims.verdict("c", "faster", 3.26, (0.42, 6.22)).holds  # the interval holds 1
    assert not claims.verdict("d", "faster", 1.3, None).holds  # no interval, no verdict
    assert claims.verdict("e", None, 1.3, None).holds  # a withheld verdict claims nothing
    assert claims.ratio("f", ratio_of([1.5, 1.6, 1.4, 1.55, 1.5, 1.45, 1.6, 1.52])).holds
    with pytest.raises(claims.ClaimsDisagree, match=r"2 of 6 claim\(s\).*c: 'faster' \(3.26x \[0.42, 6.22\]"):
        claims.check()


def test_a_plan_against_what_ran():
    assert claims.plan("p", {"bf16": True, "workers": False}, {"bf16": True, "workers": False}).holds
    wrong = claims.plan("q", {"ddp": True, "workers": False}, {"ddp": False, "workers": True})
    assert not wrong.holds
    assert "ddp: planned to run, did not run" in wrong.checked
    assert "workers: planned to skip, ran" in wrong.checked


def test_a_prediction_outside_its_tolerance_fails_even_with_a_reason():
    assert claims.prediction("m", "peak", 100, 110, 0.15).holds
    assert not claims.prediction("m", "peak", 615, 1414, 0.15).holds
    with_reason = claims.prediction("m", "peak", 615, 1414, 0.15, reason="the allocator keeps memory")
    assert not with_reason.holds  # the reason is shown; the page's number was still wrong
    assert "off by 57%, outside its 15%: the allocator keeps memory" in with_reason.checked


def test_one_answer_per_question_and_conditions():
    assert claims.same("01", "precision", "quiet-key", "bf16").holds
    assert claims.same("04", "precision", "quiet-key", "bf16").holds
    assert claims.same("07", "precision", "busy-key", "fp32").holds  # other conditions: its own answer
    clash = claims.same("07", "precision", "quiet-key", "fp32")
    assert not clash.holds and "earlier answers: bf16" in clash.checked


def test_a_table_never_shows_nan_or_none():
    assert claims.filled("t", [{"verdict": "baseline", "speedup": ""}]).holds
    bad = claims.filled("t", [{"verdict": "nan", "speedup": "1.2x"}, {"verdict": None, "x": 1}])
    assert not bad.holds and "verdict" in bad.checked


def test_a_blank_where_a_value_is_required_fails_as_a_nan_does():
    """Notebook 06's reproduction printed a blank loss column on every row and passed as filled."""
    from workbench.ui.table import html_table

    rows = [{"step": 1, "script_loss": 2.3, "workbench_loss": float("nan"), "abs_diff": float("nan")}]
    assert claims.filled("live", [{"step": "1", "workbench_loss": ""}]).holds  # not measured yet
    planted = claims.filled("reproduced", [{"step": "1", "workbench_loss": ""}], required=("workbench_loss",))
    assert not planted.holds and "workbench_loss" in planted.checked
    claims.clear()
    html_table(rows, where="the script against the run", required=("workbench_loss", "abs_diff"))
    with pytest.raises(claims.ClaimsDisagree, match="the script against the run"):
        claims.check()


def test_a_drawn_table_fails_the_check_on_a_lost_verdict_or_a_nan_inside_its_text():
    from workbench.ui.table import html_table

    html_table([{"verdict": "faster", "speedup": "1.30x [1.20, 1.40]", "ms": float("nan")}], where="ok")
    html_table([{"verdict": float("nan"), "speedup": "1.30x"}], where="lost verdict")
    html_table([{"verdict": "faster", "speedup": "nanx [nan, nan]"}], where="nan ratio")
    html_table([{"verdict": "", "note": "Nonesuch, Banana"}], where="pending row")  # words, not gaps
    held = {c.where: c.holds for c in claims.made()}
    assert held == {"ok": True, "lost verdict": False, "nan ratio": False, "pending row": True}


def test_check_lists_what_holds_and_a_claim_shown_twice_is_kept_once():
    claims.verdict("a", "within noise", 1.02, (0.9, 1.1))
    claims.verdict("a", "within noise", 1.02, (0.9, 1.1))
    done = claims.check()
    assert len(done.claims) == 1
    assert "1 claim(s) on this page" in done.summary() and "within noise" in done._repr_html_()


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_ends_by_checking_its_claims(notebook):
    cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    assert "claims.check()" in "".join(cells[-1]["source"])


def test_a_gain_that_cost_accuracy_never_reads_as_clean():
    assert claims.weighed("s", "prune", "faster, but accuracy 0.995 -> 0.273", 0.995, 0.273).holds
    assert not claims.weighed("s", "prune", "faster", 0.995, 0.273).holds
    assert claims.weighed("s", "int8", "faster", 0.995, 0.990).holds
    assert claims.weighed("s", "int8", "faster", float("nan"), 0.5).holds
