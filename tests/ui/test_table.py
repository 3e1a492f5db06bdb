"""The one table renderer: titles in words, numbers to their digits, verdict chips that never paint
a costly gain green, long reasons folded, and nothing shown as 'nan' or 'None'."""

from __future__ import annotations

from workbench.measure import claims
from workbench.ui.table import COST_COLOR, STATUS_COLORS, cell_text, html_table, number_text


def test_numbers_read_at_a_glance():
    assert [number_text(v) for v in (0.08088, 1234.5, 12, 1_000_000, 3.0, None, float("nan"))] == [
        "0.0809",
        "1,234",
        "12",
        "1,000,000",
        "3",
        "",
        "",
    ]
    assert cell_text("nan") == "" and cell_text(None) == "" and cell_text(True) == "True"


def test_a_table_titles_chips_and_folds():
    why = (
        "structured pruning removed whole channels; the smaller dense matmuls are faster, and "
        "accuracy fell because the model was not fine-tuned after the channels were removed"
    )
    rows = [
        {"variant": "dense", "verdict": "baseline", "samples_per_s": 7890.4, "why": ""},
        {
            "variant": "structured",
            "verdict": "faster, but accuracy 0.995 -> 0.273",
            "samples_per_s": 12_001.0,
            "why": why,
        },
        {"variant": "csr", "verdict": None, "samples_per_s": float("nan"), "why": "skipped"},
    ]
    claims.clear()
    out = html_table(
        rows, ["variant", "verdict", "samples_per_s", "why"], above="timed beside others", where="test table"
    )
    assert "<th>samples/s</th>" in out and "samples_per_s" not in out
    assert "7,890" in out and "12,001" in out and ">nan<" not in out and ">None<" not in out
    assert f"background:{COST_COLOR}" in out and f"background:{STATUS_COLORS['faster']}" not in out
    assert "<details><summary>structured pruning removed whole channels ...</summary>" in out
    assert out.count("timed beside others") == 1
    assert [c.holds for c in claims.made() if c.where == "test table"] == [True]


def test_the_load_is_said_once_only_when_it_was_busy():
    from workbench.ui.table import load_line

    assert load_line([0.0, None, float("nan"), 0.1]) == ""
    assert load_line([0.2, 1.62, None]) == "other programs held up to 1.6 cores while these ran"


def test_a_shown_verdict_is_weighed_against_the_accuracy_its_row_kept():
    """The page's own cell is what is checked: a row that lost accuracy and shows only 'faster'
    fails the claims check, whatever columns the table picked; the fine-tuned accuracy counts
    where the row has one."""
    claims.clear()
    lost = {"variant": "structured 50%", "verdict": "faster", "dense_accuracy": 0.977, "accuracy": 0.744}
    html_table([lost], ["variant", "verdict"], where="planted")
    wrong = [c for c in claims.made() if not c.holds]
    assert [c.where for c in wrong] == ["planted"] and "0.977 -> 0.744" in wrong[0].checked
    claims.clear()
    said = {**lost, "verdict": "faster, but accuracy 0.977 -> 0.744"}
    recovered = {**lost, "amount": 0.5, "accuracy_finetuned": 0.975}
    html_table([said, recovered], ["variant", "verdict"], where="honest")
    assert all(c.holds for c in claims.made()) and len(claims.made()) == 3  # filled + 2 weighed
    claims.clear()
