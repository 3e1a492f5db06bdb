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
            yield (
                f"{record['event']}.{key}=huge",
                i,
                line.replace(f'"{key}":{json.dumps(record[key])}', f'"{key}":{HUGE}', 1),
            )
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


def _random_value(rng):
    """Any JSON value a damaged or hand-edited file could hold."""
    return rng.choice(
        [
            lambda: rng.choice(["", "x", "nan", "inf", "-inf", "1e999", "\u00e9\u0000", "null"]),
            lambda: rng.choice([None, True, False, [], {}, [1, "a"], {"a": {"b": []}}]),
            lambda: rng.choice([-1, 0, 2**63, -(2**63), 10**30]),
            lambda: rng.choice([-1e300, 1e300, 5e-324, -0.0, 0.5]),
        ]
    )()


def _random_damage(rng, lines: list[str]) -> tuple[str, int, str]:
    """One random change to one line: any field (those the readers check or not) set to any JSON
    value or removed, a key renamed, or bytes cut, doubled or replaced."""
    i = rng.randrange(len(lines))
    record = json.loads(lines[i])
    key = rng.choice(sorted(record))
    how = rng.choice((0, 0, 0, 1, 2, 3))  # most often a value: the readers compute with them
    if how == 0:
        value = _random_value(rng)
        return f"line {i} {record['event']}.{key}={value!r}", i, json.dumps({**record, key: value})
    if how == 1:
        return (
            f"line {i} {record['event']} without {key}",
            i,
            json.dumps({k: v for k, v in record.items() if k != key}),
        )
    if how == 2:
        return (
            f"line {i} {record['event']}.{key} renamed",
            i,
            json.dumps({(k + "_" if k == key else k): v for k, v in record.items()}),
        )
    line = lines[i]
    a = rng.randrange(len(line))
    b = min(len(line), a + rng.randrange(1, 12))
    cut = line[:a] + line[b:]
    doubled = line[:b] + line[a:]
    replaced = line[:a] + "".join(rng.choice('{}[]":,\\0 9e-') for _ in range(b - a)) + line[b:]
    name, text = rng.choice([("cut", cut), ("doubled", doubled), ("replaced", replaced)])
    return f"line {i} {record['event']} bytes {a}:{b} {name}", i, text


def test_random_damage_never_stops_a_reader(intact, tmp_path):
    """A property over 300 seeded random damages to any field of any record, the fields the readers
    do not check included: every reader (the run store, the comparison, the summary, the tailer and
    the live dashboard) keeps going, and the intact run beside it is listed whole. A damaged line
    may be read (a field no reader computes with) or skipped and named."""
    import random

    from workbench.ui.dashboard import LiveDashboard

    rng = random.Random(20261202)  # fixed: a failure names its case and replays
    lines = RunFolder(intact).events_file(0).read_text().splitlines()
    dash = LiveDashboard(poll_s=0.01)  # the panel's charts and readout, tailing each case
    failures = []
    for n in range(300):
        name, index, text = _random_damage(rng, lines)
        root = tmp_path / f"case{n}"
        shutil.copytree(intact, root / "a-intact")
        damaged = root / "b-damaged"
        shutil.copytree(intact, damaged)
        folder = RunFolder(damaged)
        changed = list(lines)
        changed[index] = text
        folder.events_file(0).write_text("\n".join(changed) + "\n")
        if n % 2:
            folder.summary_file.unlink()
        try:
            table = list_runs(root)
            assert list(table["run"]) == ["a-intact", "b-damaged"], name
            assert table["status"].iloc[0] == "completed", name
            compare([root / "a-intact", damaged])
            read_summary(damaged)
            records, problems = read_events_checked(damaged)
            assert len(records) + len(problems) == len(lines), (name, problems)
            tail = RunTail(damaged)
            tail.poll()
            assert tail.problems == problems, name
            dash.watch(damaged, alive=lambda: False)  # ended: the tailer reads to the end
            assert dash.wait(30), name
            dash.redraw()  # the tailer's last draw, again here so that its error is raised
        except Exception as e:  # every case that fails, not only the first
            failures.append(f"{name}: {type(e).__name__}: {str(e)[:200]}")
        shutil.rmtree(root)
    assert not failures, f"{len(failures)} of 300 cases failed:\n" + "\n".join(failures[:20])
