"""The notebook benchmark's rows and tables, on tiny generated notebooks run for real in fresh
kernels (seconds): an error cell, a cell writing to stderr, a timeout, a dead kernel, the tables."""

from __future__ import annotations

import nbformat
import pytest

from tools.bench import notebooks as bench


def _notebook(folder, name, *sources):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / f"{name}.ipynb")
    return folder / f"{name}.ipynb"


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    root = tmp_path_factory.mktemp("nb")
    raising = _notebook(
        root / "notebooks",
        "01_raises",
        "import os, sys\nprint('noise\\nmore', file=sys.stderr)\n"
        "assert os.environ['WORKBENCH_RUNS'].startswith(os.path.dirname(os.getcwd()))\n"
        "assert os.environ.get('WORKBENCH_QUICK') == '1'",
        "raise ValueError('boom\\nsecond line')",
    )
    before = raising.read_text()
    dies = _notebook(root / "notebooks", "03_dies", "1", "import os\nos._exit(3)", "2")
    slow = _notebook(root / "notebooks", "02_slow", "import time\ntime.sleep(60)", "print('never')")
    out = {
        "raises": bench.run_notebook(raising, root / "store1", timeout_s=60, quick=True),
        "slow": bench.run_notebook(slow, root / "store2", timeout_s=2, quick=True),
        "dies": bench.run_notebook(dies, root / "store3", timeout_s=60, quick=True),
    }
    assert raising.read_text() == before  # a copy ran, never the notebook itself
    return out


def test_an_error_cell_and_a_stderr_cell_are_counted_with_their_first_lines(rows):
    r = rows["raises"]
    assert (r["cells_run"], r["code_cells"], r["error_cells"], r["reason"]) == (2, 2, 1, "")
    assert r["first_error"] == "[2] ValueError: boom"
    assert r["stderr_cells"] == ["[1] noise"]
    assert r["seconds"] > 0 and r["leftover_processes"] == 0
    # both cells ended, the raising one too; their seconds fit in the notebook's
    assert sorted(i for i, _ in r["slowest_cells"]) == [1, 2]
    assert 0 <= sum(t for _, t in r["slowest_cells"]) <= r["seconds"]


def test_a_cell_over_the_timeout_is_the_row_s_reason_not_a_crash(rows):
    r = rows["slow"]
    assert r["reason"].startswith("timed out: a cell ran over 2 s") and "[1]" in r["reason"]
    assert r["cells_run"] == 1 and r["error_cells"] == 0 and r["seconds"] < 30
    assert r["slowest_cells"] == []  # the cell that timed out has no time of its own


def test_a_kernel_that_dies_is_the_row_s_reason(rows):
    r = rows["dies"]
    assert r["reason"] == "the kernel died (in cell [2])" and r["cells_run"] == 2


def test_table_and_markdown_show_every_notebook_and_the_goal_line(rows):
    report = {
        "machine": bench.machine(),
        "modes": ["quiet", "busy"],
        "quick": True,
        "goals": {"quiet": 240.0, "busy": 480.0},
        "notebooks": {},
    }
    for name, r in rows.items():
        report["notebooks"][name] = {
            m: dict(r, mode=m, met=not r["reason"] and not r["error_cells"]) for m in report["modes"]
        }
    text = bench.table(report)
    assert "quiet s" in text and "busy s" in text and "first error [2] ValueError: boom" in text
    assert "stderr [1] noise" in text and "timed out" in text
    assert text.splitlines()[-1].startswith("0 of 6 notebook runs met the goal")
    assert "usable of" in text and "AVX-512 " in text and ", AMX " in text
    md = bench.markdown(report).splitlines()
    assert md[0].startswith("| notebook | quiet (goal 240 s) | busy (goal 480 s) |")
    assert md[2].startswith("| `raises` |") and "errors" in md[2] and "| 2/2 | 1 | 1 |" in md[2]
    assert "timed out" in md[3]


def test_only_picks_notebooks_by_prefix_and_refuses_a_prefix_that_matches_none(tmp_path):
    for name in ("00_a", "01_b", "06_c"):
        _notebook(tmp_path, name, "1")
    assert [p.stem for p in bench.select(["01", "06"], tmp_path)] == ["01_b", "06_c"]
    with pytest.raises(SystemExit, match="no notebook starts with 09"):
        bench.select(["09"], tmp_path)


def test_a_process_that_ends_soon_after_its_kernel_is_not_counted_as_left_running(tmp_path):
    """As a spare pre-launch check ends itself once its kernel has gone; one that would run on is
    stopped and counted."""
    import psutil

    nb = _notebook(
        tmp_path / "notebooks",
        "04_children",
        "import subprocess, sys\n"
        "soon = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3)'], "
        "start_new_session=True)\n"
        "stays = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
        "start_new_session=True)\n"
        "open('pids', 'w').write(f'{soon.pid} {stays.pid}')",
    )
    r = bench.run_notebook(nb, tmp_path / "store", timeout_s=60, quick=True)
    assert r["error_cells"] == 0 and r["leftover_processes"] == 1, r
    soon, stays = (int(p) for p in (tmp_path / "store" / "notebooks" / "pids").read_text().split())
    for pid in (soon, stays):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
