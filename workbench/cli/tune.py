"""`workbench tune`: measure the settings this machine can run on your model, keep only what
pairs of slices in warm processes show faster by more than the minimum effect, and hand back the config, the
exported script and a reason for every setting kept or dropped.

    workbench tune --model mynet.py:build --budget-min 10 [--memory-budget 4]
    workbench tune --preset smoke --budget-min 2 --json --out tuned/   # also train.py, torchrun, SLURM
"""

from __future__ import annotations

import json
import sys

from ..config import ConfigError
from ..trials.engine import SLICE_S
from ..tune.search import FIRST
from ._interrupt import Interrupt
from .run import add_baseline_args, base_config, parse_settings


def add_parser(sub):
    p = sub.add_parser(
        "tune",
        help="find the settings that make your model train faster here, each kept only when measured faster",
        description=__doc__.split("\n\n")[0],
    )
    add_baseline_args(p, "the baseline")
    p.add_argument("--budget-min", type=float, default=10.0, help="minutes for the whole tune (default 10)")
    p.add_argument(
        "--slice-s",
        type=float,
        default=SLICE_S,
        help="seconds of steps a slice, both sides alike (default %(default)s)",
    )
    p.add_argument(
        "--memory-budget",
        type=float,
        metavar="GIB",
        help="GiB a rank may hold: the largest batch that fits it is tried (default: what "
        "the pre-launch check says is available)",
    )
    p.add_argument(
        "--bound-by",
        choices=sorted(FIRST),
        metavar="GROUP",
        help="what bounds the step, instead of profiling it: " + " | ".join(sorted(FIRST)),
    )
    p.add_argument("--out", help="a folder for the recommended config's train.py, torchrun and SLURM files")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def main(args) -> int:
    base = base_config(args)
    shared = parse_settings(args.set, "--set")
    base = base.replace(**shared) if shared else base
    if not args.budget_min > 0:
        raise ConfigError(f"--budget-min must be > 0 minutes, got {args.budget_min}")
    if not 0.01 <= args.slice_s <= 60:
        raise ConfigError(f"--slice-s must be between 0.01 and 60 seconds, got {args.slice_s}")
    if args.memory_budget is not None and not args.memory_budget > 0:
        raise ConfigError(f"--memory-budget must be > 0 GiB, got {args.memory_budget}")

    decided = []  # what the tune decided so far: kept however it ends

    def heard(d):
        decided.append(d)
        if not args.json:
            print(f"  {d.status} {d.setting}: {d.outcome}", file=sys.stderr, flush=True)

    from ..tune.tuner import tune  # torch: only once the input is checked

    with Interrupt("tune", quiet=args.json) as interrupted:
        try:
            report = tune(
                base,
                budget_s=60 * args.budget_min,
                slice_s=args.slice_s,
                bound_by=args.bound_by,
                memory_budget_gib=args.memory_budget,
                on_decision=heard,
                stop=interrupted,
            )
        except KeyboardInterrupt:  # the second Ctrl-C: no report, but what it decided
            interrupted.asked = interrupted.asked or "SIGINT"
            return _decided_so_far(base, decided, args.json, interrupted)
    out = report.as_dict()
    if args.out:
        from ..export.bundle import export

        written = export(report.config, args.out, overwrite=True)
        out["export"] = {
            "dir": str(written.dir),
            "files": [p.name for p in written.files],
            "commands": written.single_node,
        }
    if interrupted():
        out["interrupted"] = interrupted.asked
    print(json.dumps(out, indent=2) if args.json else report.text())
    if interrupted() and not args.json:
        print(interrupted.said(), file=sys.stderr)
    return interrupted.exit_code(0)


def _decided_so_far(base, decided: list, as_json: bool, interrupted: Interrupt) -> int:
    """What an interrupted tune decided before it stopped, printed (or valid JSON marked so)."""
    settings = {k: v for d in decided if d.kept for k, v in d.settings.items()}
    if as_json:
        print(
            json.dumps(
                {
                    "interrupted": interrupted.asked,
                    "settings": settings,
                    "config": base.replace(**settings).to_dict(),
                    "decisions": [d.as_dict() for d in decided],
                },
                indent=2,
            )
        )
    else:
        for d in decided:
            print(f"  {d.status:<12} {d.setting:<14} {d.outcome}")
        print(f"kept so far: {', '.join(f'{k}={v}' for k, v in settings.items()) or 'nothing'}")
        print(interrupted.said(), file=sys.stderr)
    return interrupted.exit_code()
