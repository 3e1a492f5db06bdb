"""`workbench ab --cmd` on your own script, honest on a shared machine: an A/A test (the same
command on both sides) and a real variant (bf16 autocast), quiet and beside two busy processes,
with `examples/own_loop.py`, a plain PyTorch loop tracked by `workbench.track`.

    python -m tools.bench commands [--rounds 6] [--budget-s 2] [--out FILE]

Each run is a fresh process whose threads are the script's own (torch's default: every usable
core), so the busy rows show what a user's script meets there.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path

from workbench.events import SAMPLES_PER_S
from workbench.procs import OtherWork
from workbench.trials.script_ab import Command, command_ab
from .results import bench_command, machine_line, results_file, write_results

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "own_loop.py"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tools.bench commands",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rounds", type=int, default=6, help="pairs of runs in each row")
    p.add_argument("--budget-s", type=float, default=2.0, help="seconds of steps a run")
    p.add_argument("--out", default=str(results_file("ab-cmd")), help="the results file")
    args = p.parse_args(argv)
    base = f"{sys.executable} {SCRIPT} --epochs 1000"
    pairs = {
        "A/A (the same command)": (Command(base), Command(base)),
        "--bf16 vs fp32": (Command(base), Command(f"{base} --bf16")),
    }
    lines = [
        "# `workbench ab --cmd` on a plain PyTorch script",
        "",
        f"Measured {datetime.date.today()}. Machine: "
        f"{machine_line()}. `examples/own_loop.py` (an MLP on the digits, batch 64, AdamW), "
        f"{args.rounds} pairs of fresh runs a row after one uncounted run of each side, "
        f"{args.budget_s:g} s of steps a run; the script's own threads. B over A: the median "
        "ratio of samples/s with its 95 % interval, and the verdict.",
        "",
        "| comparison | condition | B vs A | A samples/s | B samples/s |",
        "|---|---|---|---|---|",
    ]
    for condition, load in (("quiet", nullcontext()), ("beside two busy processes", OtherWork(2))):
        with load:
            for name, (a, b) in pairs.items():
                with tempfile.TemporaryDirectory() as tmp:
                    r = command_ab(a, b, args.rounds, budget_s=args.budget_s, folder=tmp)
                    sides = [r.side(label) for label in r.labels]
                rates = [f"{s[SAMPLES_PER_S]:,.0f}" if s[SAMPLES_PER_S] else "-" for s in sides]
                lines.append(f"| {name} | {condition} | {r.comparison.text()} | {rates[0]} | {rates[1]} |")
                print(lines[-1], flush=True)
    write_results(lines, args.out, bench_command("commands", argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
