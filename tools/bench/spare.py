"""Run -> first step as a run panel launches: the default config, threads and wait policy chosen by
the launcher from the machine's load, the warm spare kept between runs; quiet and beside two busy
processes, the two conditions alternated round by round (workbench.measure.order), and a cold start
(run.warm_worker = false) beside each for reference.

    python -m tools.bench spare [--rounds 6] [--out FILE]

Before each press the benchmark pauses as a person does (PAUSE_S: the spare's watcher looks at the
load twice meanwhile) and waits until the spare is ready. "First step" is when rank 0 logged step 1,
counted from the call that starts the run.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time
from contextlib import nullcontext

from workbench.config import RunConfig
from workbench.distributed.launch import launcher, start_run
from workbench.distributed.warm import WATCH_S
from workbench.measure.ratios import median_interval
from workbench.measure.order import order_of
from workbench.procs import OtherWork
from workbench.runfolder import RunFolder
from .launch import _first_step_t
from .results import bench_command, machine_line, results_file, write_results

GOAL_S = 1.0
PAUSE_S = 3 * WATCH_S  # a person's pause before Run: the watcher looks twice, then the spare warms


def press_run(cfg: RunConfig) -> dict:
    """One Run as a panel's button starts it, after a person's pause."""
    time.sleep(PAUSE_S)
    launcher().wait_ready(120)
    t0 = time.time()
    handle = start_run(cfg)
    first = _first_step_t(handle.run_dir, 1)
    handle.wait(300)
    launch = RunFolder(handle.run_dir).launch()
    return {
        "seconds": first - t0,
        "warm": "warm" in launch,
        "policy": launch["threads"]["wait_policy"],
        "cold_because": launch.get("cold_because"),
    }


def seconds_text(values: list[float]) -> str:
    interval = median_interval(values)
    return f"{statistics.median(values):.2f} s" + (
        f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else " (too few for an interval)"
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tools.bench spare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rounds", type=int, default=6, help="presses of each kind in each condition")
    p.add_argument("--out", default=str(results_file("spare")), help="the results file")
    args = p.parse_args(argv)
    base = RunConfig.default().replace(
        **{"run.steps": 20, "run.eval_batches": 0, "run.save_weights": False, "run.label": "bench-spare"}
    )
    kinds = {"warm spare": base, "cold (run.warm_worker = false)": base.replace(**{"run.warm_worker": False})}
    presses: dict[tuple[str, str], list[dict]] = {}
    launcher().keep_warm(base)
    try:
        for i in range(args.rounds):
            for condition in order_of(["quiet", "two busy processes"], i):
                with OtherWork(2) if condition != "quiet" else nullcontext():
                    for kind in order_of(list(kinds), i):
                        presses.setdefault((condition, kind), []).append(press_run(kinds[kind]))
            print(f"round {i + 1} of {args.rounds}", flush=True)
    finally:
        launcher().close()
    lines = [
        f"# Run -> first step with the warm spare, quiet and busy ({datetime.date.today()})",
        "",
        f"Machine: {machine_line()}. The default config, {base.run.steps} steps, threads and wait "
        f"policy chosen by the launcher each run; {args.rounds} presses of each kind in each "
        "condition, interleaved; median [95 % interval of the median].",
        "",
        "| condition | start | Run -> first step | spare took the run | wait policy | why cold |",
        "|---|---|---|---|---|---|",
    ]
    for (condition, kind), rows in presses.items():
        times = [r["seconds"] for r in rows]
        taken = sum(r["warm"] for r in rows)
        policies = ", ".join(sorted({r["policy"] for r in rows}))
        why = "; ".join(sorted({r["cold_because"] for r in rows if r["cold_because"]}))
        lines.append(
            f"| {condition} | {kind} | {seconds_text(times)} | {taken} of {len(rows)} | {policies} | {why} |"
        )
    lines.append("")
    for condition in ("quiet", "two busy processes"):
        med = statistics.median(r["seconds"] for r in presses[(condition, "warm spare")])
        lines.append(
            f"Goal, {condition}: the warm spare's median at most {GOAL_S:.0f} s: "
            f"{'met' if med <= GOAL_S else 'not met'} ({med:.2f} s)."
        )
    write_results(lines, args.out, bench_command("spare", argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
