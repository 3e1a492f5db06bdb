"""A real browser: JupyterLab in headless Chromium (Playwright) runs 01_mixed_precision.ipynb,
then clicks the precision toggle and Run in its control panel, and checks that the live chart
gains points while the run goes, that every widget rendered, and that the comparison table lists
the runs. Screenshots land in test-output/.

    PYTHONPATH=$PWD python -m pytest -q -m browser tests/test_browser.py
"""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from lab_server import REPO, LabServer

CHROMIUM = "/usr/bin/chromium"
NOTEBOOK = "01_mixed_precision.ipynb"
OUT = REPO / "test-output"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WIDGET_ERRORS = ("Error displaying widget", "Failed to load model", "Model not found",
                 "Failed to create view", "Traceback (most recent call last)")

# Points on the panel's live loss chart (the dashboard's figure titled "Loss ...").
LOSS_POINTS_JS = """() => {
  const plots = [...document.querySelectorAll('.js-plotly-plot')].filter(gd => {
    const t = (((gd.layout || {}).title || {}).text) || '';
    return t.startsWith('Loss') && !t.startsWith('Loss by run');
  });
  if (!plots.length) return -1;
  return (plots[0].data || []).reduce((n, tr) => n + ((tr.x && tr.x.length) || 0), 0);
}"""


def _needs_browser():
    if os.path.exists(CHROMIUM):
        return
    reason = f"{CHROMIUM} is missing (Debian's chromium package); the browser test cannot run"
    if os.environ.get("WORKBENCH_REQUIRE_BROWSER") == "1":
        pytest.fail(reason + " and WORKBENCH_REQUIRE_BROWSER=1")
    pytest.skip(reason)


def _wait(cond, timeout_s, what, poll_s=0.5):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def _prompts(page) -> list[str]:
    return page.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()


def _run_all(page, lab) -> None:
    """Run > Run All Cells, once the kernel is idle; retry once if no cell starts."""
    _wait(lambda: lab.kernel_states() == ["idle"], 120, "the kernel to be idle")
    page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
    for attempt in range(2):
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
        try:
            _wait(lambda: any(re.search(r"\[(\*|\d+)\]", p) for p in _prompts(page)), 20,
                  "a cell to start")
            return
        except AssertionError:
            if attempt:
                raise


def _check_no_widget_errors(page) -> None:
    text = page.locator(".jp-Notebook").inner_text()
    for err in WIDGET_ERRORS:
        assert err not in text, f"the notebook shows {err!r}"


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.alone
def test_mixed_precision_notebook_in_a_real_browser(tmp_path):
    _needs_browser()
    from playwright.sync_api import sync_playwright

    OUT.mkdir(exist_ok=True)
    root = tmp_path / "notebooks"
    root.mkdir()
    shutil.copy(REPO / "notebooks" / NOTEBOOK, root / NOTEBOOK)  # the browser may save its copy
    runs = tmp_path / "runs"
    lab = LabServer(root, tmp_path / "jupyter", {"WORKBENCH_QUICK": "1", "WORKBENCH_RUNS": str(runs)})
    page = None
    console: list[str] = []
    try:
        lab.start()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
                page.set_default_timeout(60_000)
                page.goto(lab.url(NOTEBOOK))
                _run_all(page, lab)
                _wait(lambda: lab.kernel_states() == ["idle"] and (p := _prompts(page))
                      and all(re.search(r"\[\d+\]", x) for x in p), 420, "Run All to finish", 1)
                _check_no_widget_errors(page)
                assert page.locator(".js-plotly-plot").count() >= 6, "the charts did not render"
                names = [p.name for p in runs.iterdir()]
                ab_rounds = [n for n in names if re.search(r"-r\d+$", n)]
                assert len(names) - len(ab_rounds) == 3, names  # the panel's fp32, bf16, fp16
                assert len(ab_rounds) == 2, names  # one quick A/B round: each side once

                # a person's turn: pick bf16, ask for many steps and no time budget, press Run
                page.locator(".widget-toggle-button", has_text=re.compile(r"^bf16$")).first.click()
                for label, value in (r"^steps$", "1000000"), (r"^budget \(s\)$", "0"):
                    box = page.locator(".widget-text", has=page.locator("label", has_text=re.compile(
                        label))).locator("input").first
                    box.fill(value)
                    box.press("Tab")
                page.locator("button.widget-button.mod-success", has_text="Run").first.click()
                chart = page.locator(".js-plotly-plot").first
                chart.scroll_into_view_if_needed()
                counts = [_wait(lambda: (n := page.evaluate(LOSS_POINTS_JS)) > 0 and n, 120,
                                "the new run's first points")]
                for _ in range(2):  # (a) the chart gains points while the run goes
                    counts.append(_wait(lambda: (n := page.evaluate(LOSS_POINTS_JS)) > counts[-1]
                                        and n, 60, "the chart to gain points"))
                assert "running" in page.locator(".wb-panel-status").first.inner_text()
                page.screenshot(path=str(OUT / "browser_live_run.png"))

                page.locator("button.widget-button.mod-danger", has_text="Stop").first.click()
                status = page.locator(".wb-panel-status").first
                _wait(lambda: "stopped" in status.inner_text(), 60, "the panel to show 'stopped'")
                _check_no_widget_errors(page)  # (b)

                # (c) the panel's comparison table lists all four runs, the notebook's the three
                names = sorted(p.name for p in runs.iterdir() if not re.search(r"-r\d+$", p.name))
                assert len(names) == 4, names  # the A/B test's runs are not the panel's
                tables = page.locator(".wb-compare-table")
                _wait(lambda: all(n in tables.first.inner_text() for n in names), 30,
                      "the panel's table to list every run")
                assert all(n in tables.nth(1).inner_text() for n in names[:3])
                tables.first.scroll_into_view_if_needed()
                page.screenshot(path=str(OUT / "browser_comparison.png"))
            except BaseException:
                if page is not None:
                    page.screenshot(path=str(OUT / "browser_failure.png"))
                (OUT / "browser_jupyterlab.log").write_text(lab.log_tail(20000))
                raise
            finally:
                (OUT / "browser_console.log").write_text("\n".join(console))  # kept to read, pass or fail
                browser.close()
    finally:
        left = lab.stop()
        assert not left, f"processes left behind: {left}"
