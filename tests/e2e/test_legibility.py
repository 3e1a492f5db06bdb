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


def _chart(legend_y: float) -> str:
    """A chart with an x-axis title, its legend at `legend_y` (below -0.3 clears the title)."""
    import plotly.graph_objects as go

    fig = go.Figure(go.Bar(name="predicted", x=["rank 0", "rank 1"], y=[1, 2]))
    fig.add_bar(name="measured", x=["rank 0", "rank 1"], y=[2, 1])
    fig.update_layout(
        width=600, height=360, xaxis_title="the ranks of the run", legend=dict(orientation="h", y=legend_y)
    )
    return fig.to_html(include_plotlyjs=True, full_html=False)


STDERR = (
    "<div class='jp-OutputArea-output' data-mime-type='application/vnd.jupyter.stderr'><pre>{}</pre></div>"
)


@pytest.mark.browser
@pytest.mark.parametrize(
    "body, problem",
    [
        (TABLE, None),
        (SQUEEZED, "a table cell over 8 lines tall"),
        (TABLE.replace(">1.54<", ">None<"), "a placeholder for no value: None"),
        (TABLE.replace(">operator<", ">self_ms_per_step<"), "a field name for a title"),
        (_chart(-0.45), None),
        (_chart(-0.12), "a legend over a title"),
        (STDERR.format("UserWarning: a library's warning"), None),
        (STDERR.format("workbench: tracking this run in runs/x"), "information in an error box"),
    ],
    ids=[
        "legible",
        "squeezed",
        "placeholder",
        "field-name",
        "legend-clear",
        "legend-over-title",
        "library-warning",
        "info-as-error",
    ],
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
