"""python -m tools.bench notebooks [--only 01 06] [--busy | --both] [--json | --markdown] [--pictures]

Every notebook in notebooks/ with its default settings (WORKBENCH_QUICK removed), each in a fresh
kernel of this venv's python, top to bottom, timed from kernel start to the last cell: cells run,
error cells (the first error in one line), cells that wrote to stderr (the first line of each, so
library noise shows), what other programs held the cores meanwhile, and whether the notebook met
its goal (a 2-core machine: at most 4 min quiet, 8 min beside two busy processes).

Each notebook runs as a copy in a temporary mirror of the checkout (notebooks/NAME beside
examples/), from the copy's folder, with its own temporary run store and cache: the committed
notebooks are never touched, and a notebook's time does not depend on what ran before it. A
timeout or a dead kernel is that notebook's row; kernels, processes left behind by a notebook and
the busy processes are stopped by pid at the end, also on an error or Ctrl-C.

`--pictures` times nothing: it runs the browser test of every notebook with the defaults, quiet, in
JupyterLab in Chromium, which keeps a picture of each for its page on the site (docs/images/labs/),
and records there which command, machine, date and load took them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from workbench.cli import one_line
from workbench.machine.contention import BUSY_STEAL, ContentionMeter, steal_text
from .results import bench_command, machine, machine_line, results_file, write_results
from workbench.procs import OtherWork

REPO = Path(__file__).resolve().parents[2]
PICTURES = REPO / "docs" / "images" / "labs"
SIBLINGS = ("examples",)  # notebook 03 loads ../examples/resnet.py: the mirror keeps that layout
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
GOALS = {"quiet": 240.0, "busy": 480.0}
# a spare pre-launch check reads its config on stdin and ends at end-of-file once its kernel has
# gone, a moment after it: seen alive just after the kernel, and ended within 5 s
LEFTOVER_GRACE_S = 10.0
SLOWEST = 3  # cells named per notebook, slowest first
# ipykernel 7 says this at every start (also under JupyterLab): not the notebook's noise
KERNEL_START = re.compile(
    r"^\[IPKernelApp\] WARNING \| Kernel is running over TCP without encryption.*$", re.M
)


def kernel_env(store: Path, quick: bool = False) -> dict[str, str]:
    """This process's environment (the kernel gets all of it) with a run store and cache of its own."""
    env = {k: v for k, v in os.environ.items() if k != "WORKBENCH_QUICK"}
    env.update(WORKBENCH_RUNS=str(store / "runs"), WORKBENCH_CACHE=str(store / "cache"))
    return dict(env, WORKBENCH_QUICK="1") if quick else env


def check_kernel() -> str:
    """The command nbclient starts for kernel `python3` (jupyter_client turns a bare `python` into
    sys.executable): refuse one from another environment, whose workbench may not be this one."""
    from jupyter_client.manager import KernelManager

    exe = KernelManager(kernel_name="python3").format_kernel_cmd()[0]
    if Path(os.path.abspath(exe)).parent != Path(os.path.abspath(sys.executable)).parent:
        raise SystemExit(
            f"kernel python3 runs {exe}, not this environment's {sys.executable}: "
            f"run `{sys.executable} -m ipykernel install --sys-prefix`"
        )
    return exe


def _first_line(text: str) -> str:
    lines = [ln.split("\r")[-1].strip() for ln in ANSI.sub("", text).splitlines()]
    return next((ln for ln in lines if ln), "")


def stop_leftovers(store: Path, grace_s: float = LEFTOVER_GRACE_S) -> int:
    """Stops processes a notebook left running (a run, a spare that outlived its kernel): those
    whose run store is ours and that have not ended by themselves `grace_s` after the kernel; the
    number stopped."""
    import psutil

    def ours(p) -> bool:
        try:
            return p.environ().get("WORKBENCH_RUNS") == str(store / "runs")
        except psutil.Error:  # another user's process, or one that just ended
            return False

    mine = [p for p in psutil.process_iter() if p.pid != os.getpid() and ours(p)]
    left = psutil.wait_procs(mine, timeout=grace_s)[1]
    for p in left:
        p.terminate()
    for p in psutil.wait_procs(left, timeout=5)[1]:
        p.kill()
    return len(left)


def run_notebook(path: Path, store: Path, timeout_s: float = 600, quick: bool = False) -> dict:
    """Executes a copy of `path` under `store` in a fresh kernel; a timeout, a dead kernel or a
    kernel that never started is the row's `reason`, never an exception (Ctrl-C still stops)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    work = store / path.parent.name
    work.mkdir(parents=True, exist_ok=True)
    for name in (n for n in SIBLINGS if (path.parent.parent / n).is_dir() and not (store / n).exists()):
        shutil.copytree(path.parent.parent / name, store / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(path, work / path.name)
    nb = nbformat.read(work / path.name, as_version=4)
    meter, reading = [], []
    # id(cell) -> when it was sent (every code cell sent, in order: one that kills the kernel too),
    # and its seconds (none for a cell that never ended)
    began, took = {}, {}

    def cell_started(cell, **_) -> None:
        if cell.cell_type == "code" and cell.source.strip():
            began[id(cell)] = time.monotonic()

    def cell_executed(cell, **_) -> None:
        if id(cell) in began:
            took[id(cell)] = time.monotonic() - began[id(cell)]
        # read after every cell, while the kernel lives: once it has exited, its tree's CPU time
        # cannot be told from other programs' (nbclient's end hooks run after the shutdown)
        if meter:
            reading.append(meter[0].read())

    client = NotebookClient(
        nb,
        timeout=timeout_s,
        kernel_name="python3",
        allow_errors=True,
        startup_timeout=120,
        resources={"metadata": {"path": str(work)}},
        # what runs outside the kernel's tree (itself and what it starts): other programs, busy ones
        on_notebook_start=lambda **_: meter.append(ContentionMeter(client.km.provisioner.pid)),
        on_cell_executed=cell_executed,
        on_cell_start=cell_started,
    )
    reason, t0 = "", time.monotonic()
    with open(store / "kernel.log", "wb") as log:  # what bypasses the notebook (C code, children)
        try:
            client.execute(env=kernel_env(store, quick), stdout=log, stderr=subprocess.STDOUT)
        except CellTimeoutError:
            reason = f"timed out: a cell ran over {timeout_s:g} s"
        except DeadKernelError:
            reason = "the kernel died"
        except Exception as e:  # a kernel that never started, a broken notebook file
            reason = f"{type(e).__name__}: {one_line(str(e))}"
        finally:
            seconds = time.monotonic() - t0
            condition = reading[-1] if reading else {}
            leftovers = stop_leftovers(store)
    # nbclient turns Ctrl-C (and SIGTERM) into a kernel shutdown and carries on: stop here instead.
    if getattr(client, "_async_cleanup_kernel_future", None) is not None:
        raise KeyboardInterrupt
    code = [c for c in nb.cells if c.cell_type == "code"]
    ran = len(began)
    last_sent = next(reversed(began), None)
    last = next((i for i, c in enumerate(code, 1) if id(c) == last_sent), 0)
    errors, stderr = [], []  # code cells numbered from 1
    timed = {i: took[id(c)] for i, c in enumerate(code, 1) if id(c) in took}
    for i, cell in enumerate(code, 1):
        outs = cell.get("outputs", [])
        # a KeyboardInterrupt beside a reason is the stop of a timed-out cell, not the notebook's error
        error = next(
            (o for o in outs if o.output_type == "error" and not (reason and o.ename == "KeyboardInterrupt")),
            None,
        )
        if error:
            errors.append(f"[{i}] {error.ename}: {_first_line(error.evalue)}")
        text = "".join(o.text for o in outs if o.output_type == "stream" and o.name == "stderr")
        if text.strip():
            stderr.append(f"[{i}] {_first_line(text)}")
    return {
        "notebook": path.stem,
        "seconds": round(seconds, 1),
        "code_cells": len(code),
        "cells_run": ran,
        "reason": reason + (f" (in cell [{last}])" if reason and last else ""),
        "error_cells": len(errors),
        "first_error": errors[0] if errors else "",
        "stderr_cells": stderr,
        # where the time went: the slowest cells first, as [cell number, seconds]
        "slowest_cells": [
            [i, round(t, 1)] for i, t in sorted(timed.items(), key=lambda it: -it[1])[:SLOWEST]
        ],
        "kernel_stderr": _first_line(
            KERNEL_START.sub("", (store / "kernel.log").read_text("utf-8", "replace"))
        ),
        "leftover_processes": leftovers,
        "other_cpu_cores": condition.get("other_cpu_cores"),
        "load_avg_1m": condition.get("load_avg_1m"),
        "steal_frac": condition.get("steal_frac"),
        "machine_busy": condition.get("busy"),
    }


def run_pass(paths: list[Path], mode: str, timeout_s: float, quick: bool, goal_s: float) -> dict:
    rows = {}
    with OtherWork(2 if mode == "busy" else 0), tempfile.TemporaryDirectory(prefix="workbench-nb-") as tmp:
        for path in paths:
            r = run_notebook(path, Path(tmp) / path.stem, timeout_s, quick)
            r.update(
                mode=mode,
                goal_s=goal_s,
                met=not r["reason"] and not r["error_cells"] and r["seconds"] <= goal_s,
            )
            rows[path.stem] = r
            # progress on stderr: stdout stays the report (--json)
            slowest = ", ".join(f"[{i}] {t:g} s" for i, t in r["slowest_cells"])
            print(
                f"  {mode} {path.stem}: {r['seconds']:.1f} s {r['reason']}"
                + (f" (slowest cells: {slowest})" if slowest else ""),
                file=sys.stderr,
                flush=True,
            )
    return rows


def _seconds(r: dict) -> str:  # a quiet run that other programs disturbed is marked: it was not quiet
    return f"{r['seconds']:.1f}" + ("*" if r["mode"] == "quiet" and r.get("machine_busy") else "")


def _goal(r: dict) -> str:
    return (
        "met"
        if r["met"]
        else (r["reason"].split(":")[0] if r["reason"] else "errors" if r["error_cells"] else "too slow")
    )


COUNTS = {
    "cells": lambda r: f"{r['cells_run']}/{r['code_cells']}",
    "errors": lambda r: str(r["error_cells"]),
    "stderr": lambda r: str(len(r["stderr_cells"])),
}


def _both(by_mode: dict, fmt) -> str:
    """One value per mode, written once when the modes agree (quiet and busy run the same cells)."""
    values = [fmt(r) for r in by_mode.values()]
    return values[0] if len(set(values)) == 1 else " / ".join(values)


def _notes(r: dict) -> list[str]:
    notes = [r["reason"], r["first_error"] and f"first error {r['first_error']}"]
    notes += [f"stderr {s}" for s in r["stderr_cells"]] + [
        r["kernel_stderr"] and f"kernel stderr, outside the notebook: {r['kernel_stderr']}",
        r["leftover_processes"] and f"stopped {r['leftover_processes']} processes it left running",
        steal_text(r.get("steal_frac")),
    ]
    return [n for n in notes if n]


def table(report: dict) -> str:
    """One row per notebook (seconds and other programs' cores per mode), its notes beneath."""
    modes = report["modes"]
    lines = [
        f"{'notebook':<28}"
        + "".join(f"{m + ' s':>9}{'others':>8}" for m in modes)
        + "".join(f"{k:>8}" for k in COUNTS)
        + "  goal"
    ]
    for name, by_mode in report["notebooks"].items():
        others = lambda r: "?" if r["other_cpu_cores"] is None else f"{r['other_cpu_cores']:.2f}"  # noqa: E731
        lines.append(
            f"{name:<28}"
            + "".join(f"{_seconds(r):>9}{others(r):>8}" for r in by_mode.values())
            + "".join(f"{_both(by_mode, fmt):>8}" for fmt in COUNTS.values())
            + f"  {_both(by_mode, _goal)}"
        )
        notes = {mode: _notes(r) for mode, r in by_mode.items()}
        same = len({tuple(n) for n in notes.values()}) == 1  # said once when the modes agree
        for mode, ns in list(notes.items())[:1] if same else notes.items():
            lines += [f"    {'' if same else mode + ': '}{n[:150]}" for n in ns]
    met = [r["met"] for by_mode in report["notebooks"].values() for r in by_mode.values()]
    goals = ", ".join(f"{m} <= {report['goals'][m]:g} s" for m in modes)
    return "\n".join(
        lines
        + [
            "",
            "others: cores other programs held meanwhile (* on a quiet run: a quarter core or more, or "
            f"the hypervisor took {BUSY_STEAL:.0%} of the time or more, so not quiet); "
            "busy: two spinning processes"
            f"{'; WORKBENCH_QUICK=1 (smoke check, not the defaults)' if report['quick'] else ''}",
            f"machine: {report['machine']['summary']}",
            f"{sum(met)} of {len(met)} notebook runs met the goal ({goals}, no error cell, no timeout)",
        ]
    )


def markdown(report: dict) -> str:
    """The result as a markdown table for the README."""
    modes = report["modes"]
    lines = [
        "| notebook | "
        + " | ".join(f"{m} (goal {report['goals'][m]:g} s)" for m in modes)
        + " | cells run | error cells | cells writing to stderr |",
        "|---|" + "---:|" * (len(modes) + 3),
    ]
    for name, by_mode in report["notebooks"].items():
        lines.append(
            f"| `{name}` | "
            + " | ".join(f"{_seconds(r)} s, {_goal(r)}" for r in by_mode.values())
            + "".join(f" | {_both(by_mode, fmt)}" for fmt in COUNTS.values())
            + " |"
        )
    return "\n".join(
        lines
        + [
            "",
            f"{report['machine']['summary']}; busy: beside two spinning processes; "
            "* other programs held a quarter core or more, or the hypervisor took "
            f"{BUSY_STEAL:.0%} of the time or more, during a quiet run.",
        ]
    )


# The README's notebooks table: its last column is written here from a results file, never typed.
MINUTES_TITLE = "minutes, quiet / busy"
MINUTES_FROM = re.compile(r"^Minutes from \[([^\]]+)\]\(([^)]+)\)[^\n]*$", re.M)
ROW = re.compile(r"^\| \[`(\d\d_\w+)`\]")


def minutes(by_mode: dict) -> str:
    """A notebook's minutes in the README: quiet / busy, '-' for a mode not run, '*' for a quiet
    run that other programs disturbed, '(failed)' for a run with an error or a timeout."""

    def one(mode: str) -> str:
        r = by_mode.get(mode)
        if r is None:
            return "-"
        failed = " (failed)" if r["reason"] or r["error_cells"] else ""
        return f"{r['seconds'] / 60:.1f}{'*' if mode == 'quiet' and r.get('machine_busy') else ''}{failed}"

    return f"{one('quiet')} / {one('busy')}"


def readme_with_minutes(readme: str, report: dict, source: Path) -> str:
    """`readme` with its notebooks table's minutes column and the line naming their file rewritten
    from `report` (what `source` holds); rows of notebooks not in the report keep theirs."""
    named = (
        f"Minutes from [{source.as_posix()}]({source.as_posix()}), the notebooks with their defaults "
        f"on {report['machine']['summary']}; * a quiet run other programs disturbed."
    )
    out, last_row = [], None
    for line in readme.splitlines():
        row = ROW.match(line)
        if line.startswith("| notebook | what you learn |"):
            line = f"| notebook | what you learn | {MINUTES_TITLE} |"
        elif line.startswith("|---|---|"):
            line = "|---|---|---|"
        elif row:
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            by_mode = report["notebooks"].get(row.group(1))
            cell = minutes(by_mode) if by_mode else (cells[2] if len(cells) > 2 else "- / -")
            line = f"| {cells[0]} | {cells[1]} | {cell} |"
            last_row = len(out)
        elif MINUTES_FROM.match(line):
            line = named
        out.append(line)
    if last_row is not None and not MINUTES_FROM.search(readme):  # the first time: under the table
        out[last_row + 1 : last_row + 1] = ["", named]
    return "\n".join(out) + "\n"


def select(only: list[str] | None, folder: Path | None = None) -> list[Path]:
    paths = sorted((folder or REPO / "notebooks").glob("*.ipynb"))
    chosen = [p for p in paths if not only or any(p.stem.startswith(o) for o in only)]
    if only and not chosen:
        raise SystemExit(f"no notebook starts with {' or '.join(only)}: {', '.join(p.stem for p in paths)}")
    return chosen


def take_pictures(argv: list[str] | None) -> int:
    """Every notebook run to its end with its defaults by the browser test, quiet; the test keeps a
    picture of each in PICTURES, and pictures.json there says what took them."""
    PICTURES.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "WORKBENCH_BROWSER_DEFAULTS": "1", "WORKBENCH_LAB_PICTURES": str(PICTURES)}
    for name in ("WORKBENCH_QUICK", "WORKBENCH_BROWSER_BUSY"):
        env.pop(name, None)
    meter = ContentionMeter()
    test = REPO / "tests" / "e2e" / "test_notebooks_in_browser.py"
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)]
    code = subprocess.call(pytest, cwd=REPO, env=env)
    load = meter.read()
    about = {
        "command": bench_command("notebooks", argv),
        "machine": machine()["summary"],
        "written": f"{datetime.datetime.now():%Y-%m-%d %H:%M}",
        "other_cpu_cores": round(load["other_cpu_cores"], 2),
        "steal_frac": round(load["steal_frac"], 3),
        "passed": code == 0,
    }
    (PICTURES / "pictures.json").write_text(json.dumps(about, indent=1) + "\n")
    print(json.dumps(about, indent=1))
    return code


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tools.bench notebooks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--only", nargs="+", metavar="PREFIX", help="notebooks whose name starts so (00 06)")
    p.add_argument("--busy", action="store_true", help="beside two busy processes")
    p.add_argument("--both", action="store_true", help="quiet, then busy: both columns")
    p.add_argument("--timeout", type=float, default=600, help="seconds a cell may run (default 600)")
    p.add_argument("--goal-quiet-s", type=float, default=GOALS["quiet"])
    p.add_argument("--goal-busy-s", type=float, default=GOALS["busy"])
    p.add_argument("--json", action="store_true", help="the report as JSON")
    p.add_argument("--markdown", action="store_true", help="the report as a markdown table")
    p.add_argument("--out", help="the results file (default: docs/results/<machine>/notebooks-<modes>.md)")
    p.add_argument("--pictures", action="store_true", help="take the site's pictures instead")
    p.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)  # a smoke check: WORKBENCH_QUICK=1
    args = p.parse_args(argv)
    if args.pictures:
        return take_pictures(argv)
    paths, kernel = select(args.only), check_kernel()
    modes = ["quiet", "busy"] if args.both else ["busy" if args.busy else "quiet"]
    goals = {"quiet": args.goal_quiet_s, "busy": args.goal_busy_s}
    report = {
        "machine": machine(),
        "kernel": kernel,
        "modes": modes,
        "quick": args.quick,
        "goals": {m: goals[m] for m in modes},
        "notebooks": {p.stem: {} for p in paths},
    }
    for mode in modes:
        for name, row in run_pass(paths, mode, args.timeout, args.quick, goals[mode]).items():
            report["notebooks"][name][mode] = row
    print(json.dumps(report, indent=1) if args.json else markdown(report) if args.markdown else table(report))
    if not args.quick:  # a smoke check's times are not the notebooks'
        out = args.out or results_file(f"notebooks-{'-'.join(modes)}")
        write_results(
            [
                f"# The notebooks with their defaults, {' and '.join(modes)}",
                "",
                f"Machine: {machine_line()}.",
                "",
                markdown(report),
            ],
            out,
            bench_command("notebooks", argv),
            report,
        )
        if modes == ["quiet", "busy"] and not args.only:  # the README shows both, for every notebook
            readme = REPO / "README.md"
            readme.write_text(readme_with_minutes(readme.read_text(), report, Path(out)))
    failed = any(r["reason"] or r["error_cells"] for by in report["notebooks"].values() for r in by.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
