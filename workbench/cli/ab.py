"""`workbench ab`: is B faster than A? Both built once in warm processes, their steps alternating in
short slices; the median speed ratio with its interval, the verdict, the pairs used and dropped, and
what other programs did meanwhile.

    workbench ab --a precision.dtype=fp32 --b precision.dtype=bf16 --rounds 12
    workbench ab --set data.seq_len=32 --b precision.dtype=bf16   # --set: both sides, as everywhere
    workbench ab --preset smoke --rounds 8            # A/A: the same config on both sides
    workbench ab --b precision.dtype=bf16 --slice-s 0.5  # half a second of steps a slice
    workbench ab --model mynet.py:build --data dataset --data-factory mydata.py:build --b precision.dtype=bf16

Your own scripts (each calling workbench.track), one fresh run of each a pair:

    workbench ab --cmd "python train.py" --vs-cmd "python train.py --bf16" --budget-s 5
    workbench ab --cmd "python train.py" --vs-env OMP_NUM_THREADS=1
    workbench ab --cmd "torchrun --nproc-per-node 2 train.py" --vs-cmd "python train.py"

The report opens with the settings in which A and B differ; sides that differ in more than one
say that the ratio measures them together.
"""

from __future__ import annotations

import json
import sys

from ..config import ConfigError
from ..trials.engine import SLICE_S
from ._interrupt import Interrupt
from .run import add_baseline_args, base_config, parse_settings


def add_parser(sub):
    p = sub.add_parser(
        "ab",
        help="A/B test two configs: alternating runs, ratio with interval, verdict",
        description=__doc__.split("\n\n")[0],
    )
    add_baseline_args(p, "both sides")
    p.add_argument(
        "--a",
        action="append",
        default=[],
        metavar="FIELD=JSON",
        help="a setting of side A only (repeatable); none: A is the base config",
    )
    p.add_argument(
        "--b",
        "--vs",
        action="append",
        default=[],
        metavar="FIELD=JSON",
        dest="b",
        help="a setting of side B only (repeatable; --vs is the same); none: B is the "
        "base config (an A/A test)",
    )
    p.add_argument(
        "--slice-s", type=float, default=SLICE_S, help="seconds of steps a slice (default %(default)s)"
    )
    p.add_argument(
        "--rounds",
        type=int,
        help="pairs of slices of A and B (default: the fewest that carry a 95%% interval)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    mine = p.add_argument_group("your own scripts (instead of configs)")
    mine.add_argument(
        "--cmd",
        help="side A: a command that runs your script (tracked by "
        "workbench.track); fresh runs of each side alternate",
    )
    mine.add_argument("--vs-cmd", help="side B's command (default: --cmd again)")
    mine.add_argument(
        "--vs-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an environment variable side B adds (repeatable)",
    )
    mine.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="seconds of steps each run takes before the tracker ends it "
        "(default 5; $WORKBENCH_TIME_BUDGET_S in the script)",
    )
    mine.add_argument(
        "--warmup-runs", type=int, default=1, help="uncounted runs of each side first (default %(default)s)"
    )
    return p


def precision_only(a, b) -> str | None:
    """The 16-bit type of an A/B whose sides differ in precision alone, against fp32; else None."""
    d = a.differences(b)
    if set(d) != {"precision.dtype"} or "fp32" not in d["precision.dtype"]:
        return None
    return next(x for x in d["precision.dtype"] if x != "fp32")


def precision_why(a, dtype: str | None, matmuls: list, measured) -> str:
    """Why that type pays or not for this model: its matmuls on this machine's size curve, beside
    what this A/B measured (`measured`: B's speed over A's, where A is fp32)."""
    if dtype is None or not matmuls or a.precision.dtype != "fp32":
        return ""
    from ..hardware.lessons import reasons

    return reasons(a, matmuls, {dtype: measured}).get(dtype, "")


CONFIG_FLAGS = ("config", "model", "set", "a", "b")  # what --cmd cannot take: they set configs


def main(args) -> int:
    if args.cmd is not None or args.vs_cmd is not None or args.vs_env:
        return _commands(args)
    if args.budget_s is not None:
        raise ConfigError(
            "--budget-s is for --cmd (runs of your own script); a config's A/B "
            "runs slices of --slice-s seconds"
        )
    base = base_config(args)
    shared = parse_settings(args.set, "--set")
    base = base.replace(**shared) if shared else base
    a_changes, b_changes = parse_settings(args.a, "--a"), parse_settings(args.b, "--b")
    a = base.replace(**a_changes) if a_changes else base
    b = base.replace(**b_changes) if b_changes else base
    if not 0.01 <= args.slice_s <= 60:
        raise ConfigError(f"--slice-s must be between 0.01 and 60 seconds, got {args.slice_s}")
    if args.rounds is not None and args.rounds < 1:
        raise ConfigError(f"--rounds must be >= 1, got {args.rounds}")
    labels = (_name(a_changes, "A"), _name(b_changes, "B"))
    if labels[0] == labels[1]:
        labels = (f"{labels[0]} (A)", f"{labels[1]} (B)")

    def progress(s):
        if not args.json and s.round >= 0:
            print(f"  pair {s.round + 1} {s.label}: {s.rate:,.0f} samples/s", file=sys.stderr, flush=True)

    from ..trials.config_ab import ab_test  # torch: only once the input is checked

    sixteen = precision_only(a, b)
    with Interrupt("ab", quiet=args.json) as interrupted:  # Ctrl-C: the pairs so far are the result
        result = ab_test(
            a,
            b,
            args.rounds,
            labels,
            slice_s=args.slice_s,
            on_slice=progress,
            stop=interrupted,
            matmuls=sixteen is not None,
        )
    why = precision_why(a, sixteen, result.matmuls, result.ratio)
    out = {
        **result.as_dict(),
        **({"why": why} if why else {}),
        **({"interrupted": interrupted.asked} if interrupted() else {}),
    }
    print(json.dumps(out, indent=2) if args.json else result.text() + (f"\n  why: {why}" if why else ""))
    if interrupted() and not args.json:
        print(interrupted.said(), file=sys.stderr)
    return interrupted.exit_code(0)


def _name(changes: dict, fallback: str) -> str:
    return ", ".join(f"{k}={v}" for k, v in changes.items()) or fallback


def _commands(args) -> int:
    """`ab --cmd`: the A/B of two commands, each a fresh tracked run a pair (trials.commands)."""
    from ..trials.script_ab import BUDGET_S, Command, parse_env

    if args.cmd is None:
        raise ConfigError("--vs-cmd and --vs-env need --cmd, side A's command")
    given = [f"--{k}" for k in CONFIG_FLAGS if getattr(args, k, None)]
    if given:
        raise ConfigError(
            f"{given[0]} sets a config, and --cmd runs your own script: give the "
            "script's own flags inside --cmd and --vs-cmd instead"
        )
    budget = BUDGET_S if args.budget_s is None else args.budget_s
    if not 0.1 <= budget <= 3600:
        raise ConfigError(f"--budget-s must be between 0.1 and 3600 seconds, got {args.budget_s}")
    if args.rounds is not None and args.rounds < 1:
        raise ConfigError(f"--rounds must be >= 1, got {args.rounds}")
    if args.warmup_runs < 0:
        raise ConfigError(f"--warmup-runs must be >= 0, got {args.warmup_runs}")
    a = Command(args.cmd)
    b = Command(args.vs_cmd or args.cmd, parse_env(args.vs_env, "--vs-env"))
    a.argv(), b.argv()  # refused before anything runs

    def progress(s):
        if not args.json:
            which = "warm-up" if s.round < 0 else f"pair {s.round + 1}"
            print(
                f"  {which} {s.label}: {s.rate:,.0f} samples/s over {s.steps} steps",
                file=sys.stderr,
                flush=True,
            )

    from ..trials.script_ab import command_ab  # torch: only once the input is checked

    with Interrupt("ab", quiet=args.json) as interrupted:
        result = command_ab(
            a, b, args.rounds, budget_s=budget, warmup=args.warmup_runs, on_slice=progress, stop=interrupted
        )
    out = {**result.as_dict(), **({"interrupted": interrupted.asked} if interrupted() else {})}
    print(json.dumps(out, indent=2) if args.json else result.text())
    if interrupted() and not args.json:
        print(interrupted.said(), file=sys.stderr)
    return interrupted.exit_code(0)
