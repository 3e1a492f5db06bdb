"""`workbench prune`: a pruning ratio sweep with measured accuracy, size and latency, and a verdict.

    workbench prune --json --amounts 0,0.5,0.9 --finetune-epochs 2 --train-epochs 10
    workbench prune --run-dir runs/20250101-120000_mlp-fp32 --method structured
    workbench prune --model my_models.py:build --eval my_models.py:score --data digits
"""
from __future__ import annotations

import json
import sys

from ..config import ConfigError, RunConfig


DIGITS_MLP = RunConfig.smoke().replace(**{"model.width": 256, "model.depth": 2})


def add_subject_args(p) -> None:
    """Which model: a built-in or an import path, fresh or from a run folder, and how to score."""
    p.add_argument("--run-dir", help="use the trained weights saved in this run folder")
    p.add_argument("--trust-code", action="store_true",
                   help="run the model/data factory a --run-dir names even though this workbench "
                        "did not create that folder here (read its code first)")
    p.add_argument("--config", help="a RunConfig JSON file (default: the digits MLP 64-256-256-10)")
    p.add_argument("--model", help="mlp | cnn | package.module:factory | file.py:factory")
    p.add_argument("--width", type=int, help="built-in model width")
    p.add_argument("--depth", type=int, help="built-in model depth")
    p.add_argument("--data", help="digits | synthetic_images | text")
    p.add_argument("--eval", help="your scoring function model -> float, 'pkg.mod:fn' or 'file.py:fn'")
    p.add_argument("--train-epochs", type=int, default=0,
                   help="quickly train a fresh model in-process first (ignored with --run-dir)")
    p.add_argument("--batch-sizes", default="1,64", help="comma-separated, e.g. 1,64")
    p.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds")
    p.add_argument("--json", action="store_true", help="print the records as JSON")


def parse_list(text: str, kind, flag: str) -> list:
    try:
        return [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{flag} must be comma-separated {kind.__name__} values, got {text!r}") from None


def subject_from_args(args):
    from ..compress.subject import Subject
    from ..compress.sweep import finetune

    if args.run_dir:
        from ..runstore import load_config
        from ..train.trust import check_trust

        what = check_trust(args.run_dir, load_config(args.run_dir), args.trust_code)
        if what:
            print(f"workbench: loading {args.run_dir}: {what}", file=sys.stderr, flush=True)
        return Subject.from_run(args.run_dir, args.eval, trust_code=args.trust_code)
    cfg = RunConfig.load(args.config) if args.config else DIGITS_MLP
    changes = {k: v for k, v in (("model.name", args.model), ("model.width", args.width),
                                 ("model.depth", args.depth), ("data.name", args.data)) if v is not None}
    if args.model == "cnn" and not args.data:
        changes["data.name"] = "synthetic_images"
    cfg = cfg.replace(**changes) if changes else cfg
    subject = Subject.from_config(cfg, eval_fn=args.eval)
    if args.train_epochs < 0:
        raise ConfigError(f"--train-epochs must be >= 0, got {args.train_epochs}")
    if args.train_epochs:
        finetune(subject.model, subject, args.train_epochs)
    return subject


def add_parser(sub):
    p = sub.add_parser("prune", help="sweep pruning ratios: accuracy, size, latency, verdict",
                       description="Sweep pruning amounts on a model; every point is timed side by "
                                   "side with the dense model.")
    add_subject_args(p)
    p.add_argument("--method", default="magnitude", help="magnitude | random | structured")
    p.add_argument("--scope", default="global", help="layer | global (unstructured methods)")
    p.add_argument("--amounts", default="0,0.3,0.5,0.7,0.9", help="fractions, comma-separated")
    p.add_argument("--finetune-epochs", type=int, default=0, help="fine-tune after pruning")
    return p


COLUMNS = ["amount", "accuracy", "accuracy_finetuned", "sparsity", "params", "params_removed",
           "size_bytes",
           "speedup_b1", "verdict"]


def main(args) -> int:
    import torch

    from ..compress.sweep import SweepConfig, run_sweep

    scfg = SweepConfig(amounts=parse_list(args.amounts, float, "--amounts"), method=args.method,
                       scope=args.scope, finetune_epochs=args.finetune_epochs,
                       batch_sizes=tuple(parse_list(args.batch_sizes, int, "--batch-sizes")),
                       rounds=args.rounds)
    subject = subject_from_args(args)
    df = run_sweep(subject, scfg)
    if args.json:
        out = {"model": subject.name, "torch": torch.__version__, "timing_threads": 1,
               "sweep": scfg.__dict__ | {"batch_sizes": list(scfg.batch_sizes)},
               "records": json.loads(df.to_json(orient="records"))}
        print(json.dumps(out, indent=2))
    else:
        big = max(scfg.batch_sizes)
        cols = [c for c in COLUMNS + [f"speedup_b{big}"] if c in df.columns]
        print(df[cols].to_string(index=False))
        for _, r in df.iterrows():
            print(f"{r['amount']:.2f}: {r['verdict']}: {r['why']}")
    return 0


if __name__ == "__main__":
    from . import main as cli_main
    sys.exit(cli_main(["prune", *sys.argv[1:]]))
