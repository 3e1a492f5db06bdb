"""Prove every GPU path of the workbench in one command, and bring back one report:

    python -m tools.gpucheck --out DIR            # or: make gpu-check OUT=DIR
    python -m tools.gpucheck --parts training,ddp --budget-s 300

Without a GPU it says why and exits 0 at once (torch is not even imported when there is no NVIDIA
device node). With one it runs each part under its own time limit (the report, ddp, fsdp, monitor,
compression, loading, then training with what is left: 450 s in all by default), continues past a
part that fails, writes DIR/gpucheck.json after every part and prints a table at the end. Exit
status: 0 when no part failed, 1 when one failed or ran out of time, 2 for bad arguments, 3 when a
part hung the device.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from workbench.config import ConfigError
from .check import DEFAULT_BUDGET_S, check_budget, run_check, select
from .probe import missing_required, no_gpu_reason, torch_reason
from .report import format_table, skipped_report, write_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.gpucheck",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", default="gpucheck-out", help="folder for gpucheck.json and the runs")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=DEFAULT_BUDGET_S,
        help=f"the whole check's time budget in seconds (default {DEFAULT_BUDGET_S:.0f})",
    )
    parser.add_argument("--parts", default=None, help="comma-separated parts to run (default: all)")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    try:
        budget = check_budget(args.budget_s)
        specs = select(args.parts)
    except ConfigError as e:
        print(f"gpucheck: {e}", file=sys.stderr)
        return 2
    reason = no_gpu_reason() or torch_reason()
    if reason:
        rep = skipped_report(reason, budget)
        rep["wall_s"] = round(time.monotonic() - t0, 3)
        path = write_report(Path(args.out), rep)
        print(format_table(rep))
        print(f"report: {path}")
        return 0
    missing = missing_required()
    if missing:
        rep = skipped_report(
            f"cannot run: {', '.join(missing)} not installed for {sys.executable}; "
            "bring the wheels (docs/gpu-check.md) and pip install them",
            budget,
        )
        rep["status"] = "failed"
        print(f"gpucheck: {rep['reason']}; report: {write_report(Path(args.out), rep)}", file=sys.stderr)
        return 1
    return run_check(Path(args.out), budget, specs)


if __name__ == "__main__":
    sys.exit(main())
