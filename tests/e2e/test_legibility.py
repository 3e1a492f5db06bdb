"""The browser test's legibility check catches what a reader would: each kind of problem planted on
a small page of its own, and a page without them passes (no JupyterLab: only the check)."""

from __future__ import annotations

import pytest

from browser_page import ARGS, CHROMIUM, legibility, needs_browser

from workbench.ui.table import html_table

SHAPES = "[[16, 4, 64, 16], [16, 4, 64, 16], [16, 4, 64, 16], [16, 64]]"
ROWS = [
    {"operator": f"aten::op_{i}", "phase": "backward", "own ms": 1.54, "calls": 2, "shapes": SHAPES}
    for i in range(3)
]
TABLE = html_table(ROWS, where="planted")  # the workbench's own table and its style
# 07's operator table once sat beside a chart in a box too narrow for it: rows many lines tall
SQUEEZED = f"<div style='width:160px'>{TABLE}</div>"


@pytest.mark.browser
@pytest.mark.parametrize(
    "body, problem",
    [
        (TABLE, None),
        (SQUEEZED, "a table cell over 8 lines tall"),
        (TABLE.replace(">1.54<", ">None<"), "a placeholder for no value: None"),
        (TABLE.replace(">operator<", ">self_ms_per_step<"), "a field name for a title"),
    ],
    ids=["legible", "squeezed", "placeholder", "field-name"],
)
def test_each_legibility_problem_planted_on_a_page_is_found(body, problem):
    needs_browser()
    from playwright.sync_api import sync_playwright

    page_html = (
        f"<html><body style='width:1400px'><div class='jp-OutputArea-output'>{body}</div></body></html>"
    )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_content(page_html)
            found = legibility(page)["problems"]
        finally:
            browser.close()
    if problem is None:
        assert found == [], found
    else:
        assert any(p.startswith(problem) for p in found), found
