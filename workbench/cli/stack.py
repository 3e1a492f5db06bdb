"""`workbench stack`: the stacking study on your model: from a baseline, try changes one at a time,
each against the best config so far (both built once in warm processes, their steps alternating
in slices), keep only what is measured faster, and print the waterfall as a table: what each step
added, samples/s, the ratio to the best before it with its interval, the verdict, whether it was
kept, every skipped step with the reason, and the kept config measured against the baseline.

    workbench stack --model mynet.py:build --data dataset --data-factory mydata.py:build
    workbench stack --preset smoke --changes bf16,workers,ddp --rounds 8 --json
    workbench stack --inference RUN_DIR          # the inference end: + structured pruning, + int8
"""

from __future__ import annotations

import argparse
import json
import sys

from ..config import ConfigError
from ..runfolder import RunFolder
from ..trials.changes import CHANGES, STACK_STEP
from ..trials.engine import SLICE_S
from .quant import CHOICES as QUANT_CHOICES
from ._interrupt import Interrupt
from .run import OWN_CONFIG, add_baseline_args, base_config, parse_settings, refuse_beside, say_trust

DEFAULT_CHANGES = "bf16,channels_last,workers,pin_memory,ddp"  # notebook 06's list; compile is slow


def add_parser(sub):
    p = sub.add_parser(
        "stack",
        help="add changes one at a time on your model, each step measured "
        "in rounds: the waterfall as a table",
        description=__doc__.split("\n\n")[0],
    )
    add_baseline_args(p, "the baseline")
    p.add_argument(
        "--changes",
        default=DEFAULT_CHANGES,
        help=f"comma-separated, stacked in this order: {' | '.join(CHANGES)} (default {DEFAULT_CHANGES})",
    )
    p.add_argument(
        "--slice-s",
        type=float,
        default=SLICE_S,
        help="seconds of steps a slice, the same for every step (default %(default)s)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        help="rounds of slices of every step (default: the fewest that carry a 95%% interval)",
    )
    p.add_argument("--json", action="store_true", help="print the study as JSON")
    p.add_argument("--budget-s", type=float, help=argparse.SUPPRESS)  # removed: refused with its successor
    inference = p.add_argument_group(
        "the inference study",
        "a trained run's model, + structured pruning, + int8: inference samples/s timed interleaved",
    )
    inference.add_argument(
        "--inference", metavar="RUN_DIR", help="stack pruning and int8 on this run's trained weights instead"
    )
    inference.add_argument(
        "--amount",
        type=float,
        default=0.5,
        help="share of channels/neurons structured pruning removes (default 0.5)",
    )
    inference.add_argument(
        "--method",
        choices=QUANT_CHOICES[1:],
        default="dynamic_int8",
        metavar="METHOD",
        help=" | ".join(QUANT_CHOICES[1:]) + " (default dynamic_int8)",
    )
    inference.add_argument("--batch", type=int, default=64, help="inference batch (default 64)")
    inference.add_argument(
        "--trust-code",
        action="store_true",
        help="run the model/data factory RUN_DIR names even though this "
        "workbench did not create that folder here (read its code first)",
    )
    return p


def parse_changes(text: str) -> list[str]:
    items = [c.strip() for c in text.split(",") if c.strip()]
    allowed = ", ".join(CHANGES)
    if not items:
        raise ConfigError(f"--changes must name at least one of {allowed}, got {text!r}")
    for item in items:
        if item not in CHANGES:
            raise ConfigError(f"--changes: {item!r} is not a change the study knows; allowed: {allowed}")
    return items


def inference(args) -> int:
    """The inference end of the study on a run's trained weights."""
    refuse_beside(
        args,
        "--inference uses the run's own model, data and weights",
        {**OWN_CONFIG, "set": [], "changes": DEFAULT_CHANGES, "preset": "default", "slice_s": SLICE_S},
    )
    if not 0 < args.amount < 1:
        raise ConfigError(f"--amount must be between 0 and 1 (a share to prune), got {args.amount}")
    if args.batch < 1:
        raise ConfigError(f"--batch must be >= 1, got {args.batch}")
    from ..runstore import load_config
    from ..stacking.inference import inference_study

    say_trust(
        "workbench", "loading", args.inference, load_config(args.inference), args.trust_code, quiet=args.json
    )
    df = inference_study(
        args.inference,
        amount=args.amount,
        method=args.method,
        batch=args.batch,
        rounds=args.rounds or 15,
        trust_code=args.trust_code,
    )
    records = json.loads(df.to_json(orient="records"))
    note = df.attrs.get("accuracy_note", "")
    if args.json:
        print(
            json.dumps(
                {
                    "run_dir": str(args.inference),
                    "amount": args.amount,
                    "method": args.method,
                    "batch": args.batch,
                    "accuracy_note": note or None,
                    "study": records,
                    "kept": df.attrs.get("kept", {}),
                    "product": df.attrs.get("product"),
                },
                indent=2,
            )
        )
        return 0
    from ..stacking.waterfall_text import study_text

    print(study_text(records))
    for rec in records:
        if rec.get("size_mib") is not None:
            print(
                f"{rec[STACK_STEP]}: accuracy {rec['accuracy']:.3f}, {rec['size_mib']:.3f} MiB, "
                f"{rec['latency_ms']:.3f} ms a batch of {args.batch}"
            )
    if note:
        print(f"note: {note}")
    return 0


REMOVED = {  # flag -> what replaces it, refused for one release (docs/changelog.md)
    "budget_s": "--budget-s was removed: a step is now --rounds pairs of --slice-s seconds of steps "
    "a side against the best config so far; use --slice-s",
}


def main(args) -> int:
    for flag, said in REMOVED.items():
        if getattr(args, flag, None) is not None:
            raise ConfigError(said)
    if args.rounds is not None and args.rounds < 1:
        raise ConfigError(f"--rounds must be >= 1, got {args.rounds}")
    if args.inference:
        return inference(args)
    base = base_config(args)
    settings = parse_settings(args.set, "--set")
    base = base.replace(**settings) if settings else base
    changes = parse_changes(args.changes)
    if not 0.01 <= args.slice_s <= 60:
        raise ConfigError(f"--slice-s must be between 0.01 and 60 seconds, got {args.slice_s}")

    from ..measure.ratios import min_rounds
    from ..stacking.plan import plan
    from ..stacking.study import run_study  # torch: only once the input is checked

    rounds = args.rounds or min_rounds()
    planned = plan(base, changes)
    if not args.json:
        print(
            f"stacking {len(changes)} change(s): {rounds} round(s) of {args.slice_s:g} s slices "
            "of every step",
            file=sys.stderr,
            flush=True,
        )

    def heard(s):
        if not args.json and s.round >= 0:
            print(f"  round {s.round + 1} {s.label}: {s.rate:,.0f} samples/s", file=sys.stderr, flush=True)

    with Interrupt("stack", quiet=args.json) as interrupted:  # Ctrl-C: the rounds so far are the table
        df = run_study(base, changes, rounds=rounds, slice_s=args.slice_s, on_slice=heard, stop=interrupted)
    records = json.loads(df.to_json(orient="records"))
    adds = {s.change.label: s.change.settings for s in planned}
    for rec in records:
        rec["adds"] = adds.get(rec[STACK_STEP], {})
    if args.json:
        print(
            json.dumps(
                {
                    "baseline": base.to_dict(),
                    "changes": changes,
                    "rounds": rounds,
                    "slice_s": args.slice_s,
                    "study": records,
                    "kept": df.attrs.get("kept", {}),
                    "product": df.attrs.get("product"),
                    **({"interrupted": interrupted.asked} if interrupted() else {}),
                },
                indent=2,
            )
        )
    else:
        from ..stacking.waterfall_text import study_text

        print(study_text(records))
        best = df.attrs.get("best_run_dir")
        if best and RunFolder(best).weights_file.is_file():
            print(f"next, the inference end on the best config's model: workbench stack --inference {best}")
        if interrupted():
            print(interrupted.said(), file=sys.stderr)
    return interrupted.exit_code(0)
