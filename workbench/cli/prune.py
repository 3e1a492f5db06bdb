"""`workbench prune`: a pruning ratio sweep with measured accuracy, size and latency, and a verdict.

    workbench prune --json --amounts 0,0.5,0.9 --finetune-epochs 2
    workbench prune --run-dir runs/20250101-120000_mlp-fp32 --method structured
    workbench prune --model my_models.py:build --eval my_models.py:score --data digits
    workbench prune --model examples/resnet.py:build --data dataset --data-factory examples/strokes.py:build

Without --run-dir the model is fresh, and is trained in-process first (--train-epochs, default
5: the digits MLP reaches about 95 % in a second) so that its accuracy means something; with
--train-epochs 0 the output says plainly that it does not. Every speedup is the median of paired
rounds against the dense model with its interval; every row says how much of the model it touched.
"""

from __future__ import annotations

import json
import sys

from ..config import BUILTIN_DATA, ConfigError, RunConfig
from ._interrupt import Interrupt
from .run import MODELS, add_set_arg, refuse_beside, say_trust

DIGITS_MLP = RunConfig.smoke().replace(**{"model.width": 256, "model.depth": 2})
TRAIN_EPOCHS = 5  # in-process training of a fresh model: seconds on digits, about 95 % accuracy
DATA_FLAGS = (
    "digits | synthetic_images | text | image_folder --data-path DIR | dataset --data-factory FILE:build"
)


def add_subject_args(p) -> None:
    """Which model: a built-in or an import path, fresh or from a run folder, and how to score."""
    p.add_argument("--run-dir", help="use the trained weights saved in this run folder")
    p.add_argument(
        "--trust-code",
        action="store_true",
        help="run the model/data factory a --run-dir names even though this workbench "
        "did not create that folder here (read its code first)",
    )
    p.add_argument("--config", help="a RunConfig JSON file (default: the digits MLP 64-256-256-10)")
    p.add_argument("--model", help=MODELS)
    p.add_argument("--width", type=int, help="built-in model width")
    p.add_argument("--depth", type=int, help="built-in model depth")
    p.add_argument("--data", help=" | ".join(BUILTIN_DATA) + " (default: what the run or the model names)")
    p.add_argument(
        "--data-factory", help="your Dataset factory for --data dataset, 'file.py:build' or 'pkg.mod:build'"
    )
    p.add_argument("--data-path", help="the image folder for --data image_folder")
    add_set_arg(p)
    p.add_argument("--eval", help="your scoring function model -> float, 'pkg.mod:fn' or 'file.py:fn'")
    p.add_argument(
        "--train-epochs",
        type=int,
        default=None,
        help=f"train a fresh model in-process first (default {TRAIN_EPOCHS}; 0: no "
        "training, and the accuracy means nothing; ignored with --run-dir)",
    )
    p.add_argument("--batch-sizes", default="1,64", help="comma-separated, e.g. 1,64")
    p.add_argument(
        "--rounds", type=int, default=15, help="interleaved timing rounds (6 or more give a 95 %% interval)"
    )
    p.add_argument("--json", action="store_true", help="print the records as JSON")


def parse_list(text: str, kind, flag: str) -> list:
    try:
        return [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{flag} must be comma-separated {kind.__name__} values, got {text!r}") from None


def subject_config(args) -> RunConfig:
    """The config the model and data come from: --config or the digits MLP, with the flags."""
    from .run import parse_settings

    cfg = RunConfig.from_file(args.config) if args.config else DIGITS_MLP
    if args.model is not None:
        cfg = cfg.with_model(args.model)
        own = ":" in args.model
        if own and not args.data and not args.config:
            raise ConfigError(
                f"--model {args.model!r} is your own model, which does not say what "
                f"data it takes: add --data ({DATA_FLAGS})"
            )
        if args.model == "cnn" and not args.data:
            cfg = cfg.replace(**{"data.name": "synthetic_images"})
    changes = {
        k: v
        for k, v in (
            ("model.width", args.width),
            ("model.depth", args.depth),
            ("data.name", args.data),
            ("data.factory", args.data_factory),
            ("data.path", args.data_path),
        )
        if v is not None
    }
    if args.data == "dataset" and not args.data_factory and not cfg.data.factory:
        raise ConfigError(
            "--data dataset needs --data-factory FILE:build (the factory returning your torch Dataset)"
        )
    if args.data == "image_folder" and not args.data_path and not cfg.data.path:
        raise ConfigError("--data image_folder needs --data-path DIR (ROOT/<class>/<image>.png)")
    changes.update(parse_settings(args.set, "--set"))
    return cfg.replace(**changes) if changes else cfg


def subject_from_args(args):
    """The Subject to compress, trained when it is fresh (or marked untrained)."""
    from ..compress.subject import Subject
    from ..compress.prune_sweep import finetune

    if args.run_dir:
        refuse_beside(
            args,
            "--run-dir uses the run's own model and data",
            dict.fromkeys(("model", "data", "data_factory", "config")),
        )
        from ..runstore import load_config

        say_trust("workbench", "loading", args.run_dir, load_config(args.run_dir), args.trust_code)
        return Subject.from_run(args.run_dir, args.eval, trust_code=args.trust_code)
    epochs = TRAIN_EPOCHS if args.train_epochs is None else args.train_epochs
    if epochs < 0:
        raise ConfigError(f"--train-epochs must be >= 0, got {epochs}")
    subject = Subject.from_config(subject_config(args), eval_fn=args.eval)
    if epochs:
        finetune(subject.model, subject, epochs)
    subject.trained = bool(epochs)
    return subject


def timing_header(records: list[dict]) -> str:
    """Threads, rounds and the load the pairs met, said once for a table."""
    from ..compress.stats import conditions_line

    if not records:
        return ""
    r = records[-1]
    busy = conditions_line(records)
    return f"timed on {r.get('timing_threads')} thread(s), paired rounds against the dense model" + (
        f"; {busy}" if busy else ""
    )


def add_parser(sub):
    p = sub.add_parser(
        "prune",
        help="sweep pruning ratios: accuracy, size, latency, verdict",
        description="Sweep pruning amounts on a model; every point is timed side by "
        "side with the dense model.",
    )
    add_subject_args(p)
    p.add_argument("--method", default="magnitude", help="magnitude | random | structured")
    p.add_argument("--scope", default="global", help="layer | global (unstructured methods)")
    p.add_argument("--amounts", default="0,0.3,0.5,0.7,0.9", help="fractions, comma-separated")
    p.add_argument("--finetune-epochs", type=int, default=0, help="fine-tune after pruning")
    return p


COLUMNS = [
    "amount",
    "accuracy",
    "accuracy_finetuned",
    "coverage",
    "sparsity",
    "model_sparsity",
    "params",
    "params_removed",
    "size_bytes",
]


def main(args) -> int:
    import torch

    from ..compress.long_search import search_progress
    from ..compress.stats import speedup_label
    from ..compress.prune_sweep import SweepConfig, run_sweep

    scfg = SweepConfig(
        amounts=parse_list(args.amounts, float, "--amounts"),
        method=args.method,
        scope=args.scope,
        finetune_epochs=args.finetune_epochs,
        batch_sizes=tuple(parse_list(args.batch_sizes, int, "--batch-sizes")),
        rounds=args.rounds,
    )
    subject = subject_from_args(args)
    note = subject.accuracy_note()
    if note:  # before the sweep's minutes, not after
        print(f"workbench prune: note: {note}", file=sys.stderr, flush=True)

    def heard(line):  # a long dependency-graph search says what it is doing
        if not args.json:
            print(f"  {line}", file=sys.stderr, flush=True)

    def point_done(done, total, rec):
        print(
            f"  point {done} of {total}: {rec['amount']:.0%} pruned, accuracy {rec['accuracy']:.3f}, "
            f"{rec['verdict']}",
            file=sys.stderr,
            flush=True,
        )

    with search_progress(heard), Interrupt("prune", quiet=args.json) as interrupted:
        df = run_sweep(
            subject,
            scfg,
            stop=interrupted,  # Ctrl-C: the points measured so far
            progress=None if args.json else point_done,
        )
    records = json.loads(df.to_json(orient="records"))
    if args.json:
        out = {
            "model": subject.name,
            "torch": torch.__version__,
            "timing_threads": records[0]["timing_threads"] if records else None,
            "trained": subject.trained,
            "accuracy_note": note or None,
            "sweep": scfg.__dict__ | {"batch_sizes": list(scfg.batch_sizes)},
            "records": records,
            **({"interrupted": interrupted.asked} if interrupted() else {}),
        }
        print(json.dumps(out, indent=2))
        return interrupted.exit_code(0)
    print(df[[c for c in COLUMNS if c in df.columns]].to_string(index=False))
    print(timing_header(records))
    for r in records:
        speed = "; ".join(f"b{b} {speedup_label(r, b, conditions=False)}" for b in scfg.batch_sizes)
        print(f"{r['amount']:.2f}: {speed}\n      {r['verdict']}: {r['why']}")
    if note:
        print(note)
    if interrupted():
        print(interrupted.said(), file=sys.stderr)
    return interrupted.exit_code(0)


if __name__ == "__main__":
    from . import main as cli_main

    sys.exit(cli_main(["prune", *sys.argv[1:]]))
