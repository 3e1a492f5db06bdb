"""A page of headless Chromium on a private JupyterLab (Playwright, Debian's chromium): the browser
tests' shared steps (open, Run All, wait) and what they check on every page (no widget errors,
nothing a reader cannot read). Screenshots and the console land in test-output/."""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path

import pytest

from lab_server import REPO, LabServer
from launch_helpers import wait_for

CHROMIUM = "/usr/bin/chromium"
OUT = REPO / "test-output"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WIDGET_ERRORS = (
    "Error displaying widget",
    "Failed to load model",
    "Model not found",
    "Failed to create view",
    "Traceback (most recent call last)",
)


def needs_browser():
    if os.path.exists(CHROMIUM):
        return
    reason = f"{CHROMIUM} is missing (Debian's chromium package); the browser test cannot run"
    if os.environ.get("WORKBENCH_REQUIRE_BROWSER") == "1":
        pytest.fail(reason + " and WORKBENCH_REQUIRE_BROWSER=1")
    pytest.skip(reason)


def wait(cond, timeout_s, what, poll_s=0.5):
    """launch_helpers.wait_for at a page's pace: a page is looked at twice a second."""
    return wait_for(cond, timeout_s, what, poll_s)


def prompts(page) -> list[str]:
    return page.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()


def run_all(page, lab) -> None:
    """Run > Run All Cells, once the kernel is idle; retry once if no cell starts."""
    wait(lambda: lab.kernel_states() == ["idle"], 120, "the kernel to be idle")
    page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
    for attempt in range(2):
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
        try:
            wait(lambda: any(re.search(r"\[(\*|\d+)\]", p) for p in prompts(page)), 20, "a cell to start")
            return
        except AssertionError:
            if attempt:
                raise


def check_no_widget_errors(page) -> None:
    text = page.locator(".jp-Notebook").inner_text()
    for err in WIDGET_ERRORS:
        at = text.find(err)
        assert at < 0, f"the notebook shows {err!r}: ...{text[max(0, at - 300) : at + 2000]}"


@contextmanager
def lab_page(tmp_path: Path, env: dict, name: str, timeout_ms: int):
    """JupyterLab on tmp_path/notebooks and a page of headless Chromium: yields (lab, page,
    console). The page's console is kept in test-output/browser_{name}_console.log, pass or fail;
    on a failure a screenshot and the server's log land beside it. At the end the server and every
    process it started end, and a process left behind fails the test."""
    needs_browser()
    from playwright.sync_api import sync_playwright

    OUT.mkdir(exist_ok=True)
    lab = LabServer(tmp_path / "notebooks", tmp_path / "jupyter", env)
    console: list[str] = []
    try:
        lab.start()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = None
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
                page.set_default_timeout(timeout_ms)
                yield lab, page, console
            except BaseException:
                if page is not None:
                    page.screenshot(path=str(OUT / f"browser_{name}_failure.png"))
                (OUT / f"browser_{name}_jupyterlab.log").write_text(lab.log_tail(20000))
                raise
            finally:
                (OUT / f"browser_{name}_console.log").write_text("\n".join(console))
                browser.close()
    finally:
        left = lab.stop()
        assert not left, f"processes left behind: {left}"


# What a reader cannot read, on the whole page: a button or description label whose text is wider
# than its box (cut to "Measure prop..."), a table wider than the output cell it sits in, a table
# titled by field names (`samples_per_s`) or showing 'nan' for no value, a chart title, axis title
# or subplot title running past its chart's edges, text labels (points or bars) that overlap, a
# legend over a title, and the workbench's own information in an error-coloured (stderr) box.
LEGIBILITY_JS = """() => {
  const shown = el => el.offsetParent !== null;
  const labels = [...document.querySelectorAll('.widget-button, .widget-inline-hbox > .widget-label')]
    .filter(el => shown(el) && el.innerText.trim());
  const cut = labels.filter(el => el.scrollWidth > el.clientWidth + 1)
    .map(el => 'cut off: ' + el.innerText.trim());
  const tables = [...document.querySelectorAll('.jp-OutputArea-output table')].filter(shown);
  const wide = tables.filter(t => {
    const cell = t.closest('.jp-OutputArea-output');
    return t.getBoundingClientRect().width > cell.getBoundingClientRect().width + 1;
  }).map(t => 'table wider than its cell: ' + t.innerText.replace(/\\s+/g, ' ').slice(0, 80));
  const raw = tables.flatMap(t => [...t.querySelectorAll('th')].map(th => th.innerText.trim())
    .filter(x => /^[a-z0-9]+(_[a-z0-9]+)+$/.test(x)).map(x => 'a field name for a title: ' + x));
  const blank = tables.flatMap(t => [...t.querySelectorAll('td')].map(td => td.innerText.trim())
    .filter(x => ['nan', 'NaN', 'None', '<NA>'].includes(x)).map(x => 'a placeholder for no value: ' + x));
  // a table squeezed beside something wider: its rows grow many lines tall (07's operators once);
  // a long note folds behind <details>, so a legible row is a few lines at most
  const folded = n => { const d = n.parentElement.closest('details');
                        return d && !d.open && !n.parentElement.closest('summary'); };
  const squeezed = tables.flatMap(t => [...t.querySelectorAll('td')].filter(c => {
    const tops = new Set();  // the cell's own lines as shown (a folded note's hidden lines left out)
    const walk = document.createTreeWalker(c, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      if (!n.textContent.trim() || folded(n)) continue;
      const r = document.createRange();
      r.selectNodeContents(n);
      for (const box of r.getClientRects()) if (box.width) tops.add(Math.round(box.top));
    }
    return tops.size > 8;
  }).map(c => 'a table cell over 8 lines tall (a column too narrow for its text): '
                + c.innerText.trim().replace(/\\s+/g, ' ').slice(0, 40)));
  const plots = [...document.querySelectorAll('.js-plotly-plot')].filter(shown);
  const overlaps = (a, b) =>  // two boxes that share more than a pixel each way
    a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  const clipped = plots.flatMap(gd => {
    const svg = gd.querySelector('svg.main-svg');
    if (!svg) return [];
    const box = svg.getBoundingClientRect();
    return [...gd.querySelectorAll('.g-gtitle text, .g-xtitle text, .g-ytitle text, .annotation-text')]
      .filter(t => { const r = t.getBoundingClientRect();
                     return r.width && (r.right > box.right + 1 || r.left < box.left - 1
                                        || r.top < box.top - 1 || r.bottom > box.bottom + 1); })
      .map(t => 'chart title clipped: ' + t.textContent.slice(0, 60));
  });
  const overlap = plots.flatMap(gd => {
    const boxes = [...gd.querySelectorAll('.textpoint text, text.bartext')]
      .map(t => [t.textContent, t.getBoundingClientRect()]).filter(([s, r]) => s && r.width);
    const out = [];
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      if (overlaps(boxes[i][1], boxes[j][1]))
        out.push('chart labels overlap: ' + boxes[i][0] + ' / ' + boxes[j][0]);
    }
    return out;
  });
  // a legend drawn over an axis or chart title (02's legend once sat on its x-axis title)
  const hidden = plots.flatMap(gd => {
    const legend = gd.querySelector('.legend .bg');
    if (!legend) return [];
    const a = legend.getBoundingClientRect();
    return [...gd.querySelectorAll('.infolayer [class$="title"] text')]
      .filter(t => { const b = t.getBoundingClientRect(); return b.width && overlaps(a, b); })
      .map(t => 'a legend over a title: ' + t.textContent.slice(0, 60));
  });
  // the workbench's own information printed to stderr shows in an error's red box
  const alarming = [...document.querySelectorAll(
      ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")]
    .filter(el => shown(el) && /^workbench: /m.test(el.innerText))
    .map(el => 'information in an error box: ' + el.innerText.trim().slice(0, 60));
  return {labels: labels.length, tables: tables.length, charts: plots.length,
          problems: [...new Set([...cut, ...wide, ...raw, ...blank, ...squeezed, ...clipped, ...overlap,
                                 ...hidden, ...alarming])]};
}"""


def legibility(page) -> dict:
    """What LEGIBILITY_JS finds on the page: counts of what it checked, and each problem."""
    return page.evaluate(LEGIBILITY_JS)


def screenshot_whole(page, path: Path) -> None:
    """The whole notebook in one picture: the page made as tall as the notebook's content."""
    height = page.evaluate(
        "() => Math.max(...[...document.querySelectorAll('.jp-WindowedPanel-outer,"
        " .jp-Notebook')].map(el => { el.scrollTop = 0; return el.scrollHeight; }), 800)"
    )
    width = page.viewport_size["width"]
    page.set_viewport_size({"width": width, "height": min(int(height) + 200, 32_000)})
    page.screenshot(path=str(path))
    page.set_viewport_size({"width": width, "height": 1000})


# the outputs a reader looks for first: a chart, a panel of widgets, a table
FIRST_FIGURE = ".jp-OutputArea-output :is(.js-plotly-plot, .widget-box, .widget-tab, table)"


def lab_picture(page, path: Path, width: int = 960) -> None:
    """A small picture of the notebook as a reader sees it after Run All: one screen, scrolled to its
    first chart, panel or table (the top when it has none), shrunk to `width` pixels and kept as a
    JPEG, for the notebook's page on the site."""
    from PIL import Image

    first = page.locator(FIRST_FIGURE).first
    if first.count():
        first.evaluate("el => el.closest('.jp-Cell').scrollIntoView({block: 'start'})")
    shot = path.with_suffix(".png")
    page.screenshot(path=str(shot))
    with Image.open(shot) as image:
        image.convert("RGB").resize((width, round(image.height * width / image.width))).save(
            path, "JPEG", quality=70, optimize=True
        )
    shot.unlink()


def cell_errors(page) -> list[str]:
    """The text of every error a cell printed (an exception's output)."""
    return page.locator(
        ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
        ":has-text('Error'), .jp-RenderedText[data-mime-type="
        "'application/vnd.jupyter.error']"
    ).all_inner_texts()
