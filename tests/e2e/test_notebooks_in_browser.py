"""Every notebook as a reader sees it. JupyterLab in headless Chromium runs each notebook (its work
shrunk by WORKBENCH_QUICK=1), and the page must show no error, no cut-off label, no table wider
than its cell, no clipped chart title and no overlapping chart labels. Each notebook's last cell
checks the claims it made against its numbers, so a sentence that disagrees with them is an error
here too, and the precision lesson of one machine's conditions must be the same in every notebook
that gives it. A picture of each whole notebook lands in test-output/notebooks/ for a person to
look at. Notebook 01 runs in test_browser.py, where a person's clicks follow.

To check the notebooks as people run them, with their defaults and beside other work:

    WORKBENCH_BROWSER_DEFAULTS=1 WORKBENCH_BROWSER_BUSY=2 \
        python -m pytest tests/e2e/test_notebooks_in_browser.py

(notebook 01 included, two busy processes held throughout, and a longer wait per notebook).
`python -m tools.bench notebooks --pictures` runs it with the defaults, quiet, to take the picture
of each notebook that its page on the site shows (WORKBENCH_LAB_PICTURES names their folder).
"""

from __future__ import annotations

import os
import re
import shutil
from contextlib import nullcontext
from pathlib import Path

import pytest

from browser_page import (
    CHROMIUM,
    OUT,
    cell_errors,
    check_no_widget_errors,
    lab_page,
    legibility,
    lab_picture,
    prompts,
    run_all,
    screenshot_whole,
    wait,
)
from lab_server import REPO
from workbench.procs import OtherWork

DEFAULTS = os.environ.get("WORKBENCH_BROWSER_DEFAULTS") == "1"
BUSY = int(os.environ.get("WORKBENCH_BROWSER_BUSY") or 0)
PICTURES = os.environ.get("WORKBENCH_LAB_PICTURES")  # a folder: each notebook's picture for its lab page
NOTEBOOKS = sorted(p.name for p in (REPO / "notebooks").glob("0*.ipynb"))
# Without Chromium (and where the suite does not demand it) each notebook still runs, in a kernel
# of its own, and its last cell still checks its claims: only what a page looks like goes unchecked.
BROWSER = os.path.exists(CHROMIUM) or os.environ.get("WORKBENCH_REQUIRE_BROWSER") == "1"
LESSON = re.compile(r"the precision to try first \[([^\]]+)\]: (fp32|bf16|fp16|cannot tell apart here)")
LESSONS: dict[str, tuple[str, str]] = {}  # conditions -> (precision, the notebook that said it first)


@pytest.fixture(scope="module")
def machine_cache(tmp_path_factory, digits_file):
    """One cache for every notebook, as one machine has: what one notebook measured under some
    conditions (the precision lesson) the next reads, so their answers agree as they do for a
    person. With a cache each, each notebook measured anew, and two measurements near the
    boundary of a verdict could disagree."""
    from workbench.cache import PRIVATE
    from workbench.disk import make_dirs

    cache = make_dirs(tmp_path_factory.mktemp("machine") / "cache", PRIVATE)
    shutil.copyfile(digits_file, cache / digits_file.name)
    return cache


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_a_notebook_runs_and_reads_well_in_a_browser(tmp_path, name, monkeypatch, machine_cache):
    if BROWSER and name.startswith("01_") and not DEFAULTS:
        pytest.skip("notebook 01 runs in test_browser.py, with a person's clicks after it")
    root = tmp_path / "notebooks"
    root.mkdir()
    shutil.copy(REPO / "notebooks" / name, root / name)
    (tmp_path / "examples").symlink_to(REPO / "examples")  # the notebooks' ../examples
    env = {
        "WORKBENCH_QUICK": "0" if DEFAULTS else "1",
        "WORKBENCH_RUNS": str(tmp_path / "runs"),
        "WORKBENCH_CACHE": str(machine_cache),
    }
    load = OtherWork(BUSY) if BUSY else nullcontext()
    if not BROWSER:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        with load:
            run_in_a_kernel(root / name)
        return
    with lab_page(tmp_path, env, name[:2], 60_000) as (lab, page, _), load:
        page.goto(lab.url(name))
        run_all(page, lab)

        def finished():
            errors = cell_errors(page)
            assert not errors, f"a cell of {name} failed: {errors[0][-3000:]}"
            shown = prompts(page)
            return lab.kernel_states() == ["idle"] and shown and all(re.search(r"\[\d+\]", p) for p in shown)

        wait(finished, 1800 if DEFAULTS else 900, f"{name} to run to its end", 1)
        check_no_widget_errors(page)
        seen = legibility(page)
        (OUT / "notebooks").mkdir(parents=True, exist_ok=True)
        screenshot_whole(page, OUT / "notebooks" / f"{name[:-6]}.png")
        if PICTURES:
            lab_picture(page, Path(PICTURES) / f"{name[:-6]}.jpg")
        assert seen["problems"] == [], seen
        text = page.locator(".jp-Notebook").evaluate("el => el.textContent")
        said = LESSON.findall(text)
        with open(OUT / "notebooks" / "lessons.txt", "a") as kept:  # for a person comparing two sessions
            kept.writelines(f"{name} [{key}]: {precision}\n" for key, precision in said)
        for key, precision in said:  # one lesson per model and machine's conditions
            first = LESSONS.setdefault(key, (precision, name))
            assert precision == first[0], f"{name} says {precision}, {first[1]} said {first[0]}"


def run_in_a_kernel(path):
    """Every cell of the notebook at `path` in a fresh kernel started in its folder; a cell that
    raises (its claims check included) fails the test with the cell's error."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    NotebookClient(
        notebook,
        timeout=1800 if DEFAULTS else 900,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
