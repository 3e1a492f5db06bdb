"""`workbench ab`: is B faster than A? Short real runs in alternating rounds, the median speed ratio
with its interval, the verdict, and what other programs did meanwhile.

    workbench ab --set precision.dtype=fp32 --vs precision.dtype=bf16 --steps 60 --rounds 6
    workbench ab --preset smoke --rounds 6            # A/A: the same config on both sides
    workbench ab --vs precision.dtype=bf16 --budget-s 5  # every run 5 s of steps, rates compared
    workbench ab --model mynet.py:build --data dataset --data-factory mydata.py:build --vs precision.dtype=bf16
"""
from __future__ import annotations

import json
import sys

from ..config import BUILTIN_MODELS, ConfigError
from ..events import SAMPLES_PER_S
from .run import add_data_args, base_config, parse_settings


def add_parser(sub):
    p = sub.add_parser("ab", help="A/B test two configs: alternating runs, ratio with interval, verdict",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--config", help="a RunConfig JSON file both sides start from")
    p.add_argument("--preset", choices=["default", "smoke"], default="default")
    p.add_argument("--model", help=" | ".join([*BUILTIN_MODELS, "package.module:factory",
                                               "file.py:factory"]) + " (both sides)")
    add_data_args(p)
    p.add_argument("--both", action="append", default=[], metavar="FIELD=JSON",
                   help="a setting of both sides (repeatable), e.g. distributed.nproc=2")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=JSON",
                   help="a setting of side A (repeatable); none: A is the base config")
    p.add_argument("--vs", action="append", default=[], metavar="FIELD=JSON",
                   help="a setting of side B (repeatable); none: B is the base config (A/A test)")
    p.add_argument("--steps", type=int, help="steps per run (default: the config's)")
    p.add_argument("--budget-s", type=float, help="seconds of steps per run, the same for both sides "
                                                  "(run.time_budget_s; --steps is then the most)")
    p.add_argument("--rounds", type=int, help="rounds of A and B (default: the fewest that carry a "
                                               "95%% interval)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def main(args) -> int:
    base = base_config(args)
    shared = parse_settings(args.both, "--both")
    base = base.replace(**shared) if shared else base
    a_changes, b_changes = parse_settings(args.set, "--set"), parse_settings(args.vs, "--vs")
    a = base.replace(**a_changes) if a_changes else base
    b = base.replace(**b_changes) if b_changes else base
    if args.steps is not None and args.steps < 1:
        raise ConfigError(f"--steps must be >= 1, got {args.steps}")
    if args.budget_s is not None and not args.budget_s > 0:
        raise ConfigError(f"--budget-s must be > 0 seconds, got {args.budget_s}")
    if args.rounds is not None and args.rounds < 1:
        raise ConfigError(f"--rounds must be >= 1, got {args.rounds}")
    labels = (_name(a_changes, "A"), _name(b_changes, "B"))
    if labels[0] == labels[1]:
        labels = (f"{labels[0]} (A)", f"{labels[1]} (B)")

    def progress(label, r, summary):
        if not args.json:
            print(f"  round {r + 1} {label}: {summary[SAMPLES_PER_S]:,.0f} samples/s", file=sys.stderr,
                  flush=True)

    from ..trials.ab import ab_test  # torch: only once the input is checked

    result = ab_test(a, b, args.rounds, args.steps, labels, on_run=progress, budget_s=args.budget_s)
    print(json.dumps(result.as_dict(), indent=2) if args.json else result.text())
    return 0


def _name(changes: dict, fallback: str) -> str:
    return ", ".join(f"{k}={v}" for k, v in changes.items()) or fallback
