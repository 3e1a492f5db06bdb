"""The fault table (docs/safety.md) and the package agree: every cause the package can write into
summary.json has a row, every row's cause is one the package writes, and the test module each row
names drives that fault through real processes and checks that cause."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Where a cause is written: a Diagnosis(...) of the rule table, or a summary's "cause" field.
WRITTEN = re.compile(r'Diagnosis\(\s*"([a-z_]+)"|["\']cause["\']\s*:\s*"([a-z_]+)"|\bcause="([a-z_]+)"')


def fault_table() -> list[tuple[list[str], list[str]]]:
    """(causes, test modules) of each row of the fault table in docs/safety.md."""
    text = (ROOT / "docs" / "safety.md").read_text()
    table = text.split("**The fault table**", 1)[1].split("\n- ", 1)[0]
    rows = [ln for ln in table.splitlines() if ln.strip().startswith("|")][2:]  # past the header
    out = []
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        assert len(cells) == 4, row
        out.append((re.findall(r"`([a-z_]+)`", cells[1]), re.findall(r"`(test_[a-z_]+)`", cells[3])))
    return out


def causes_written() -> set[str]:
    found = set()
    for path in (ROOT / "workbench").rglob("*.py"):
        for match in WRITTEN.finditer(path.read_text()):
            found |= {g for g in match.groups() if g}
    return found


def test_every_cause_the_package_writes_has_a_row_and_every_row_a_written_cause():
    rows = fault_table()
    in_table = {cause for causes, _ in rows for cause in causes}
    written = causes_written()
    assert len(rows) >= 15 and all(causes for causes, _ in rows)
    assert written - in_table == set(), "causes the package writes that the fault table lacks"
    assert in_table - written == set(), "causes in the fault table the package never writes"


def test_each_row_names_a_test_module_that_checks_its_cause():
    for causes, modules in fault_table():
        assert modules, causes
        for module in modules:
            found = sorted((ROOT / "tests").rglob(f"{module}.py"))  # in whichever folder of tests/ it is
            assert len(found) == 1, f"{module}: {len(found)} test modules of that name under tests/"
            source = found[0].read_text()
            for cause in causes:
                assert f'"{cause}"' in source, f"{module} never checks the cause {cause!r}"


def test_the_scan_sees_each_way_a_cause_is_written():
    samples = {
        'Diagnosis("raised", t, m)': "raised",
        'summary["cause"] = x or {"cause": "stopped"}': "stopped",
        'stop = {"cause": "slurm_cancelled" if never is None': "slurm_cancelled",
        'summary.update(status="failed", cause="slurm_timeout")': "slurm_timeout",
    }
    for sample, cause in samples.items():
        assert {g for m in WRITTEN.findall(sample) for g in m if g} == {cause}, sample


def troubleshooting_misses(page: str) -> set[str]:
    """The causes the package writes that the troubleshooting page gives no row."""
    rows = {
        c
        for line in page.splitlines()
        if line.startswith("|")
        for c in re.findall(r"`([a-z_]+)`", line.split("|")[1])
    }
    return causes_written() - rows


def test_the_troubleshooting_page_says_what_to_do_for_every_cause():
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    assert troubleshooting_misses(page) == set()
    assert troubleshooting_misses(page.replace("| `disk_full` |", "| disk |")) == {"disk_full"}
