"""python -m tools.bench refusals [--repeat 20]

How long the command line takes to refuse bad input, as a user meets it: each case is a fresh
`python -m workbench ...` process, timed from its start to its exit, the cases interleaved and
repeated (A B C ..., ... C B A). Prints each case's median and range, the median of every refusal
against the goal (under 1 s on an idle machine), what other programs held meanwhile, and whether
any case imported torch (none may: the input is checked before anything heavy is loaded).
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
from workbench.machine.contention import ContentionMeter, busy_sentence
from .results import recorded

GOAL_S = 1.0
CASES = {
    "--steps 0": ["run", "--preset", "smoke", "--steps", "0"],
    "--set run.steps=0": ["run", "--preset", "smoke", "--set", "run.steps=0"],
    "--precision fp64": ["run", "--preset", "smoke", "--precision", "fp64"],
    "--run-dir ''": ["run", "--preset", "smoke", "--run-dir", ""],
    "--config (binary)": ["run", "--config", "BINARY"],
    "--set loader.num_workers=-1": ["run", "--preset", "smoke", "--set", "loader.num_workers=-1"],
    "ab --rounds 0": ["ab", "--preset", "smoke", "--rounds", "0"],
    "profile --steps 0": ["profile", "--preset", "smoke", "--steps", "0"],
    "tune --budget-min 0": ["tune", "--preset", "smoke", "--budget-min", "0"],
    "stack --changes turbo": ["stack", "--preset", "smoke", "--changes", "turbo"],
}


def _argv(case: list[str], folder: Path) -> list[str]:
    return [str(folder / "binary.json") if a == "BINARY" else a for a in case]


def refuse(case: list[str], folder: Path, env: dict, *extra: str):
    """(seconds, the finished process) of one refusal in a fresh interpreter."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *extra, "-m", "workbench", *_argv(case, folder)],
        capture_output=True,
        text=True,
        env=env,
        cwd=folder,
        timeout=120,
    )
    return time.perf_counter() - t0, done


def imports_torch(case: list[str], folder: Path, env: dict) -> bool:
    _, done = refuse(case, folder, env, "-X", "importtime")
    return any(line.rpartition("|")[2].strip() == "torch" for line in done.stderr.splitlines())


@recorded("refusals", "Refusals: one line and exit code 2, with how long each took")
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench refusals")
    p.add_argument("--repeat", type=int, default=20, help="times each case is refused (default 20)")
    args = p.parse_args(argv)
    if args.repeat < 1:
        print(f"--repeat must be >= 1, got {args.repeat}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="workbench-refusals-") as tmp:
        folder = Path(tmp)
        (folder / "binary.json").write_bytes(b"\xff\xfe\x00binary")
        env = {**os.environ, "WORKBENCH_RUNS": str(folder / "runs"), "WORKBENCH_CACHE": str(folder / "cache")}
        times: dict[str, list[float]] = {name: [] for name in CASES}
        bad = []
        meter = ContentionMeter()
        for r in range(args.repeat):
            for name in order_of(list(CASES), r):
                took, done = refuse(CASES[name], folder, env)
                times[name].append(took)
                lines = done.stderr.strip().splitlines()
                if done.returncode != 2 or len(lines) != 1:
                    bad.append(f"{name}: exit {done.returncode}, {len(lines)} line(s) on stderr")
        reading = meter.read()
        heavy = [name for name, case in CASES.items() if imports_torch(case, folder, env)]
    print(f"{'case':<30} {'median s':>9} {'min-max s':>13}")
    for name, ts in times.items():
        print(f"{name:<30} {statistics.median(ts):>9.2f} {min(ts):>6.2f}-{max(ts):<6.2f}")
    every = [t for ts in times.values() for t in ts]
    med = statistics.median(every)
    print(
        f"\nall {len(every)} refusals: median {med:.2f} s (goal under {GOAL_S:g} s: "
        f"{'met' if med < GOAL_S else 'missed'}); each a fresh process"
    )
    print(f"imported torch: {', '.join(heavy) if heavy else 'none'}")
    print(f"other programs held {reading['other_cpu_cores']:.2f} cores meanwhile")
    busy = busy_sentence(reading)
    if busy:
        print(busy)
    for line in bad:
        print(f"not one line: {line}")
    return 1 if bad or heavy else 0


if __name__ == "__main__":
    sys.exit(main())
