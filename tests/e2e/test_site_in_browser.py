"""The documentation site as a reader sees it: built strictly, every page opened in Chromium at
1280x900, and on none of them a code block that scrolls sideways (its text cut at the right), a
page without its one title, or a long page of prose without subheadings (a results page is a
benchmark's output under its title, and is held to the first two only)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from browser_page import ARGS, CHROMIUM, needs_browser
from lab_server import REPO

pytestmark = pytest.mark.slow

# What each page reports: its code blocks wider than their box (the longest line of each), its
# headings, and the words of its prose (outside code blocks and tables).
MEASURE = """() => {
  const article = document.querySelector('article');
  const clipped = [...article.querySelectorAll('pre > code')]
    .filter(code => code.scrollWidth > code.clientWidth + 2)
    .map(code => code.innerText.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), ''));
  const prose = article.cloneNode(true);
  prose.querySelectorAll('pre, table').forEach(node => node.remove());
  return {
    clipped,
    h1: article.querySelectorAll('h1').length,
    subheadings: article.querySelectorAll('h2, h3').length,
    words: prose.innerText.split(/\\s+/).filter(Boolean).length,
  };
}"""
LONG_PAGE_WORDS = 400  # a page this long needs subheadings to be scanned


def test_no_page_of_the_built_site_clips_a_code_block_or_runs_long_without_headings(tmp_path):
    needs_browser()
    from playwright.sync_api import sync_playwright

    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=True,
        timeout=600,
    )
    pages = sorted(p for p in site.rglob("index.html") if "search" not in p.parts)
    assert len(pages) > 40, pages
    problems = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            for html in pages:
                page.goto(html.as_uri())
                seen = page.evaluate(MEASURE)
                found = [f"code cut at the right: {line[:90]!r}" for line in seen["clipped"]]
                if seen["h1"] != 1:
                    found.append(f"{seen['h1']} top headings")
                prose = html.relative_to(site).parts[0] != "results"
                if prose and seen["words"] > LONG_PAGE_WORDS and not seen["subheadings"]:
                    found.append(f"{seen['words']} words and no subheading")
                if found:
                    problems[str(html.relative_to(site).parent)] = found
        finally:
            browser.close()
    assert problems == {}
