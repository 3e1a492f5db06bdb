"""One damaged event line never hides a run: each field of each record kind of a real run is
corrupted in turn, and the run store, the comparison, the summary and the dashboard's tailer still
read every run, skipping the bad line and naming it."""
from __future__ import annotations

import json
import shutil

import pytest

from workbench.config import RunConfig
from workbench.distributed.launch import run
from workbench.events import FIELDS, RunTail, read_events_checked
from workbench.runfolder import RunFolder
from workbench.runstore import compare, list_runs, read_summary
from workbench.ui import attach

BAD = ["x", None, [], {}, -1, True, 1e300, "NaN"]  # each wrong for some field
HUGE = "9" * 20000  # a number too long to read


@pytest.fixture(scope="module")
def intact(tmp_path_factory):
    root = tmp_path_factory.mktemp("intact")
    cfg = RunConfig.smoke().replace(**{"run.steps": 4, "run.threads": 1, "run.eval_batches": 0})
    summary = run(cfg, run_dir=root / "run", timeout_s=180)
    assert summary["status"] == "completed"
    return root / "run"


def variants(intact):
    """(name, line index, new line text) for every field the readers check, in every record."""
    lines = RunFolder(intact).events_file(0).read_text().splitlines()
    for i, line in enumerate(lines):
        record = json.loads(line)
        for key in record:
            if key not in FIELDS:
                continue
            for bad in BAD:
                if FIELDS[key][0](bad):
                    continue  # this value is fine for this field
                yield f"{record['event']}.{key}={bad!r}", i, json.dumps({**record, key: bad})
            yield f"{record['event']}.{key}=huge", i, line.replace(
                f'"{key}":{json.dumps(record[key])}', f'"{key}":{HUGE}', 1)
        yield f"{record['event']} torn", i, line[: len(line) // 2]


def test_every_reader_keeps_going_past_any_one_damaged_line(intact, tmp_path):
    cases = list(variants(intact))
    assert len(cases) > 60  # every record kind and checked field of a real run
    failures = []
    for n, (name, index, text) in enumerate(cases):
        root = tmp_path / f"case{n}"
        shutil.copytree(intact, root / "a-intact")
        damaged = root / "b-damaged"
        shutil.copytree(intact, damaged)
        folder = RunFolder(damaged)
        lines = folder.events_file(0).read_text().splitlines()
        lines[index] = text
        folder.events_file(0).write_text("\n".join(lines) + "\n")
        if n % 2:  # half the cases make the readers rebuild the summary from the events
            folder.summary_file.unlink()
        try:
            table = list_runs(root)
            assert list(table["run"]) == ["a-intact", "b-damaged"], name
            assert (table["status"] != "broken").all(), (name, table.to_dict("records"))
            compare([root / "a-intact", damaged])
            read_summary(damaged)
            records, problems = read_events_checked(damaged)
            assert len(problems) == 1 and "rank0.jsonl line" in problems[0], (name, problems)
            assert len(records) == len(lines) - 1, name
            tail = RunTail(damaged)
            tail.poll()
            assert tail.problems == problems
        except Exception as e:  # collect every case that fails, not only the first
            failures.append(f"{name}: {type(e).__name__}: {e}")
    assert not failures, "\n".join(failures[:20])


def test_the_dashboard_draws_a_run_with_a_damaged_line(intact, tmp_path):
    damaged = tmp_path / "run"
    shutil.copytree(intact, damaged)
    folder = RunFolder(damaged)
    lines = folder.events_file(0).read_text().splitlines()
    lines[2] = lines[2].replace('"t":', '"t":"x","was":', 1)
    folder.events_file(0).write_text("\n".join(lines) + "\n")
    dash = attach(damaged)
    assert dash.wait(60)  # the tailer reached the end instead of dying on the line
    assert dash.series.finished and dash.series.status == "completed"
