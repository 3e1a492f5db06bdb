"""The exported train.py against a workbench run of the same config, beside two busy processes:
samples/s of each, alternated round by round (workbench.measure.order), and their ratio per round.

    python -m tools.bench export [--rounds 12] [--steps 1500] [--out FILE]

Both choose their threads and wait policy by the same rule at their start (the script carries a
copy of it); the workbench run's figure is its summary's samples/s, the script's the one its last
line prints, each over the steps after its warm-up. The goal: the script at least GOAL x the run.
"""

from __future__ import annotations

import argparse
import datetime
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from workbench.config import RunConfig
from workbench.distributed.launch import run
from workbench.events import SAMPLES_PER_S
from workbench.export.bundle import export
from workbench.measure.ratios import median_interval
from workbench.measure.order import order_of
from workbench.procs import OtherWork
from .results import bench_command, machine_line, results_file, write_results

GOAL = 0.9
DONE = re.compile(r"^done: .* ([0-9.]+) samples/s on \d+ rank", re.M)
KEPT = re.compile(r"kept (\d+)")


def script_rate(script: Path) -> tuple[float, str]:
    """Samples/s the exported script reports, and what it said of its threads."""
    out = subprocess.run(
        [sys.executable, str(script), "--out", "", "--log-every", "1000000"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=script.parent,
    )
    found = DONE.search(out.stdout)
    if out.returncode != 0 or not found:
        raise RuntimeError(f"{script} failed ({out.returncode}): {out.stderr[-500:]}")
    kept = KEPT.findall(out.stdout)
    return float(found.group(1)), kept[-1] if kept else "no trial"


def workbench_rate(cfg: RunConfig) -> tuple[float, str]:
    summary = run(cfg, timeout_s=600)
    if summary.get("status") != "completed":
        raise RuntimeError(f"the workbench run ended {summary.get('status')}: {summary.get('message')}")
    kept = (summary.get("thread_trial") or {}).get("kept")
    return summary[SAMPLES_PER_S], str(kept) if kept is not None else "no trial"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tools.bench export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rounds", type=int, default=12, help="rounds of the two, alternated")
    p.add_argument("--steps", type=int, default=1500, help="steps of each run")
    p.add_argument("--out", default=str(results_file("export")), help="the results file")
    args = p.parse_args(argv)
    cfg = RunConfig.default().replace(
        **{
            "run.steps": args.steps,
            "run.eval_batches": 0,
            "run.save_weights": False,
            "run.warm_worker": False,
            "run.label": "bench-export",
        }
    )
    script = export(cfg, Path(tempfile.mkdtemp(prefix="workbench-bench-")) / "export").dir / "train.py"
    sides = {"workbench run": lambda: workbench_rate(cfg), "exported train.py": lambda: script_rate(script)}
    rates: dict[str, list[float]] = {k: [] for k in sides}
    kept: dict[str, list[str]] = {k: [] for k in sides}  # the thread count each run kept
    with OtherWork(2):
        for i in range(args.rounds):
            for name in order_of(list(sides), i):
                rate, threads = sides[name]()
                rates[name].append(rate)
                kept[name].append(threads)
            print(f"round {i + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in rates.items()), flush=True)
    ratios = [s / w for s, w in zip(rates["exported train.py"], rates["workbench run"])]
    mid, interval = statistics.median(ratios), median_interval(ratios)
    shown = f"{mid:.2f}x" + (
        f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else " (too few rounds for an interval)"
    )
    lines = [
        f"# The exported train.py against a workbench run, beside two busy processes "
        f"({datetime.date.today()})",
        "",
        f"Machine: {machine_line()}. The default config (digits MLP), {args.steps} steps a run, "
        f"{args.rounds} rounds alternated; samples/s medians [95 % interval of the median].",
        "",
        "| side | samples/s | threads kept, round by round |",
        "|---|---|---|",
    ]
    for name, values in rates.items():
        iv = median_interval(values)
        lines.append(
            f"| {name} | {statistics.median(values):,.0f}"
            + (f" [{iv[0]:,.0f}, {iv[1]:,.0f}]" if iv else "")
            + " | "
            + ", ".join(kept[name])
            + " |"
        )
    lines += [
        "",
        f"Script over run, per round: {shown}; goal at least {GOAL}: median "
        f"{'met' if mid >= GOAL else 'not met'}"
        + (f", interval's bottom {'met' if interval[0] >= GOAL else 'not met'}" if interval else "")
        + ".",
    ]
    write_results(
        lines,
        args.out,
        bench_command("export", argv),
        {
            SAMPLES_PER_S: rates,
            "threads_kept": kept,
            "ratios": ratios,
            "steps": args.steps,
            "rounds": args.rounds,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
