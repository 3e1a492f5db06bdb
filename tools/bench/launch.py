"""Run to first step: the workbench launcher, cold and with its warm worker, against a plain
`python` script doing the same work (one process) and bare `torchrun` (2 ranks); where the launch
time goes; then samples/s with 2 ranks against 1 on this machine.

    python -m tools.bench launch            # or: python -m tools.bench.launch --rounds 6

Every variant runs the same config (the default MLP on the digits, 3 steps, one thread per
process), alternated round by round (A B C ..., then ... C B A) so load on a shared machine hits
all alike. "First step" is when every rank has logged step 1, counted from the call that starts
the run (start_run, or the script's process start). A warm variant waits, untimed, for its spare
to be ready; no spare warms up while another variant is timed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from workbench.trials.engine import order_of
from workbench.config import RunConfig
from workbench.distributed.launch import launcher, run, start_run
from workbench.events import (
    CREATED_T,
    EVENT,
    INIT,
    RANK,
    READY,
    SAMPLES_PER_S,
    START,
    STEP,
    TIME,
    read_events,
)
from workbench.export.bundle import export
from workbench.measure.ratios import median_interval
from workbench.runfolder import RunFolder
from workbench.runstore import create_run_dir
from .results import recorded

THREADS = "1"  # per process, in every variant: what torchrun gives each rank
GOAL_WARM_S = 1.0
GOAL_WARM_VS_TORCHRUN = 0.6


def _first_step_t(run_dir, nproc: int, timeout_s: float = 300) -> float:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        firsts = {r[RANK]: r[TIME] for r in read_events(run_dir) if r.get(EVENT) == STEP}
        if len(firsts) >= nproc:
            return max(firsts.values())
        time.sleep(0.01)
    raise RuntimeError(f"no first step in {run_dir} after {timeout_s} s")


def workbench_launch(cfg: RunConfig, hot: bool) -> tuple[float, Path]:
    if hot:
        launcher().keep_warm(cfg)
        if not launcher().wait_ready(300):
            raise RuntimeError("no warm spare after 300 s")
    else:
        launcher().close()
    t0 = time.time()
    handle = start_run(cfg.replace(**{"run.warm_worker": hot}))
    first = _first_step_t(handle.run_dir, cfg.distributed.nproc)
    handle.wait(300)
    launcher().close()  # its replacement would warm up while the next variant is timed
    if hot and "warm" not in RunFolder(handle.run_dir).launch():
        raise RuntimeError(f"the warm variant started cold: {handle.run_dir}")
    return first - t0, handle.run_dir


def torchrun_launch(cfg: RunConfig) -> tuple[float, Path]:
    run_dir = create_run_dir(cfg)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={cfg.distributed.nproc}",
        "-m",
        "workbench.worker",
        "--config",
        str(RunFolder(run_dir).config_file),
    ]
    t0 = time.time()
    with open(RunFolder(run_dir).log_file, "wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS=THREADS)
        )
    first = _first_step_t(run_dir, cfg.distributed.nproc)
    proc.wait(300)
    return first - t0, run_dir


def script_launch(script: Path) -> tuple[float, None]:
    """The exported train.py run by plain python: until it prints its first step."""
    t0 = time.time()
    proc = subprocess.Popen(
        [sys.executable, str(script), "--log-every", "1", "--out", ""],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS=THREADS, PYTHONUNBUFFERED="1"),
    )
    first = None
    for line in proc.stdout:
        if first is None and line.startswith("step"):
            first = time.time()
    if proc.wait(300) != 0 or first is None:
        raise RuntimeError(f"{script} failed with exit code {proc.returncode}")
    return first - t0, None


PHASES = [
    "launcher; torchrun start and agent rendezvous; or hand-over to the warm rank",
    "rank interpreter start",
    "rank imports (torch, workbench)",
    "process-group rendezvous",
    "data, model, DDP wrap, optimizer",
    "first step",
]


def breakdown(run_dir, t0: float) -> dict[str, float]:
    """Seconds per phase of rank 0's launch, from its own records. A warm rank started and
    imported before the run: those phases are 0, and its start is when it took the job."""
    recs = [r for r in read_events(run_dir) if r.get(RANK) == 0]
    first = {r[EVENT]: r for r in reversed(recs)}  # earliest record of each kind
    launch, start, ready, step = first[START], first[INIT], first[READY], first[STEP]
    created = launch["main_t"] if "warm" in launch else (launch.get(CREATED_T) or launch["main_t"])
    pg = ready.get("init_pg_s", 0.0)
    return dict(
        zip(
            PHASES,
            [
                created - t0,
                launch["main_t"] - created,
                start[TIME] - launch["main_t"],
                pg,
                ready[TIME] - start[TIME] - pg,
                step[TIME] - ready[TIME],
            ],
        )
    )


def _launch_t0(run_dir) -> float:
    return RunFolder(run_dir).launch()["t"]


def _median_text(values: list[float]) -> str:
    interval = median_interval(values)
    return f"{statistics.median(values):6.2f} s" + (
        f"  [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "  (too few rounds for an interval)"
    )


def _ratio_text(num: list[float], den: list[float]) -> tuple[str, float]:
    """Per round, time of one variant over another's: the median and its interval, and the
    interval's top (the median when there is none)."""
    ratios = [a / b for a, b in zip(num, den)]
    mid, interval = statistics.median(ratios), median_interval(ratios)
    text = f"{mid:5.2f}x" + (
        f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else " (too few rounds for an interval)"
    )
    return text, (interval[1] if interval else mid)


def launch_to_first_step(rounds: int, base: RunConfig) -> None:
    one = base.replace(
        **{
            "distributed.nproc": 1,
            "run.steps": 3,
            "run.threads": int(THREADS),
            "run.label": "bench-launch-1p",
        }
    )
    two = one.replace(**{"distributed.nproc": 2, "run.label": "bench-launch-2r"})
    script = export(one, Path(tempfile.mkdtemp(prefix="workbench-bench-")) / "export").dir / "train.py"
    variants = {
        "plain python script, 1 process": lambda: script_launch(script),
        "workbench, 1 process, cold": lambda: workbench_launch(one, False),
        "workbench, 1 process, warm worker": lambda: workbench_launch(one, True),
        "bare torchrun --standalone, 2 ranks": lambda: torchrun_launch(two),
        "workbench, 2 ranks, cold": lambda: workbench_launch(two, False),
        "workbench, 2 ranks, warm ranks": lambda: workbench_launch(two, True),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    phases: dict[str, list[dict]] = {k: [] for k in variants if k.startswith("workbench")}
    try:
        for i in range(rounds):
            for name in order_of(list(variants), i):
                seconds, run_dir = variants[name]()
                times[name].append(seconds)
                if run_dir is not None and name in phases:
                    phases[name].append(breakdown(run_dir, _launch_t0(run_dir)))
            print(
                f"round {i + 1}: "
                + ", ".join(f"{k.split(',', 1)[-1].strip()} {v[-1]:.2f} s" for k, v in times.items()),
                flush=True,
            )
    finally:
        launcher().close()
    print(
        f"\nRun -> first step, {THREADS} thread per process, medians of {rounds} interleaved "
        f"rounds [95 % interval of the median]:"
    )
    for name, values in times.items():
        print(f"  {name:<38} {_median_text(values)}")
    warm1 = times["workbench, 1 process, warm worker"]
    text1, _ = _ratio_text(warm1, times["plain python script, 1 process"])
    cold1, _ = _ratio_text(times["workbench, 1 process, cold"], times["plain python script, 1 process"])
    text2, high2 = _ratio_text(
        times["workbench, 2 ranks, warm ranks"], times["bare torchrun --standalone, 2 ranks"]
    )
    cold2, _ = _ratio_text(times["workbench, 2 ranks, cold"], times["bare torchrun --standalone, 2 ranks"])
    med1 = statistics.median(warm1)
    print("\nratios of time to first step, per round [95 % interval]:")
    print(
        f"  1 process, warm worker / plain python    {text1}   "
        f"(goal: at most {GOAL_WARM_S:.1f} s; median {med1:.2f} s: "
        f"{'met' if med1 <= GOAL_WARM_S else 'not met'})"
    )
    print(f"  1 process, cold / plain python           {cold1}")
    print(
        f"  2 ranks, warm ranks / bare torchrun      {text2}   (goal <= {GOAL_WARM_VS_TORCHRUN}x: "
        f"{'met' if high2 <= GOAL_WARM_VS_TORCHRUN else 'not shown'} by the interval's top)"
    )
    print(f"  2 ranks, cold / bare torchrun            {cold2}")
    for name, recs in phases.items():
        print(f"\nwhere the launch goes, {name} (rank 0, median seconds):")
        for phase in PHASES:
            values = sorted(r[phase] for r in recs)
            print(f"  {phase:<76} {values[len(values) // 2]:6.2f}")


def samples_per_s(steps: int, base: RunConfig) -> None:
    # torchrun gives each rank one thread; a plain process uses every core: show both.
    variants = {
        "1 process, all cores": (1, 0),
        "1 process, 1 thread": (1, 1),
        "2 ranks, 1 thread each": (2, 1),
    }
    rates: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(2):
        for name, (n, threads) in variants.items():
            s = run(
                base.replace(
                    **{
                        "distributed.nproc": n,
                        "run.steps": steps,
                        "run.threads": threads,
                        "run.warm_worker": False,
                        "run.label": f"bench-rate-{n}p",
                    }
                )
            )
            rates[name].append(s.get(SAMPLES_PER_S) or 0.0)
    print(
        f"\nsamples/s in total, {base.model.name} width {base.model.width}, batch "
        f"{base.loader.batch_size} per rank, {os.cpu_count()} cores, medians of 2 interleaved runs:"
    )
    med = {k: sorted(v)[len(v) // 2] for k, v in rates.items()}
    ref = med["1 process, all cores"] or 1.0
    for name, value in med.items():
        print(f"  {name:<24} {value:10,.0f}  ({value / ref:.2f}x)")
    print(
        "  two ranks share this machine's cores and add a gradient all-reduce per step; a "
        "large spread here means other work held the cores"
    )


@recorded("launch", "Run to first step: the launcher, cold and warm, against plain python and torchrun")
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench.launch", description=__doc__)
    p.add_argument("--rounds", type=int, default=6, help="interleaved rounds (6 carry a 95 %% interval)")
    p.add_argument("--steps", type=int, default=150, help="steps of the samples/s runs")
    args = p.parse_args(argv)
    base = RunConfig.default().replace(**{"run.eval_batches": 0, "run.save_weights": False})
    launch_to_first_step(args.rounds, base)
    samples_per_s(args.steps, base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
