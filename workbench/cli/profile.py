"""`workbench profile`: where a config's step time and memory go. A few profiled steps in a real
worker; prints the phases, the verdict and what to measure next, the memory beside the estimate, the
top operators and where the trace is.

    workbench profile --preset transformer                  # the small transformer
    workbench profile --config my_config.json --json        # step_ms, phases_ms, bound_by, ...
    workbench profile --model cnn --set loader.num_workers=2 --nproc 2
    workbench profile --preset transformer --checkpoint-trade blocks.layers.*   # memory vs time
    workbench profile --preset transformer --optimizers     # for-loop / foreach / fused steps
"""

from __future__ import annotations

import json

from ..config import ConfigError, RunConfig, choices
from .run import MODELS, add_data_args, add_set_arg, base_config, parse_settings

FLAGS = {
    "precision": "precision.dtype",
    "batch_size": "loader.batch_size",
    "steps": "run.steps",
    "nproc": "distributed.nproc",
    "device": "run.device",
    "threads": "run.threads",
}


def add_parser(sub):
    p = sub.add_parser(
        "profile", help="where a config's step time and memory go", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--config", help="a RunConfig JSON file")
    p.add_argument(
        "--preset",
        choices=["default", "smoke", "transformer"],
        default="default",
        help="the base config without --config (transformer: the small language model)",
    )
    p.add_argument("--model", help=MODELS)
    add_data_args(p)
    p.add_argument("--precision", help=" | ".join(choices("precision.dtype")))
    p.add_argument("--batch-size", type=int)
    p.add_argument("--steps", type=int, help="steps of the profiled run (run.steps)")
    p.add_argument("--nproc", type=int, help="ranks on this machine (torchrun); one profile per rank")
    p.add_argument("--device", help=" | ".join(choices("run.device")))
    p.add_argument("--threads", type=int, help="intra-op threads per process (run.threads)")
    add_set_arg(p)
    p.add_argument("--profile-steps", type=int, default=5, help="steps under the profiler (5)")
    p.add_argument("--top", type=int, default=10, help="operators to list (10)")
    p.add_argument(
        "--checkpoint-trade",
        nargs="*",
        metavar="MODULE",
        help="also measure checkpointing these modules (none given: the model's suggestion)",
    )
    p.add_argument(
        "--optimizers",
        action="store_true",
        help="also time the optimizer step as for-loop, foreach and fused, interleaved",
    )
    p.add_argument("--rounds", type=int, help="rounds of the A/B and optimizer timings")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def build_config(args) -> RunConfig:
    from ..profile.presets import default_transformer

    if args.config:
        cfg = RunConfig.from_file(args.config)
    else:
        cfg = default_transformer() if args.preset == "transformer" else getattr(RunConfig, args.preset)()
    cfg = base_config(args, cfg)
    changes = {field: getattr(args, flag) for flag, field in FLAGS.items() if getattr(args, flag) is not None}
    changes.update(parse_settings(args.set, "--set"))
    return cfg.replace(**changes) if changes else cfg


def main(args) -> int:
    if args.rounds is not None and args.rounds < 1:
        raise ConfigError(f"--rounds must be >= 1, got {args.rounds}")
    if args.top < 0:
        raise ConfigError(f"--top must be >= 0, got {args.top}")
    cfg = build_config(args)
    from ..profile.checkpoint import checkpoint_trade, trade_modules  # torch: the input is checked
    from ..profile.optimizers import compare_optimizers
    from ..profile.profiled_run import profile

    modules = None if args.checkpoint_trade is None else trade_modules(cfg, args.checkpoint_trade)
    b = profile(cfg, args.profile_steps)
    out = b.as_dict()
    texts = [b.text(args.top)]
    if modules is not None:
        trade = checkpoint_trade(cfg, modules, rounds=args.rounds, profile_steps=min(3, args.profile_steps))
        out["checkpoint_trade"] = trade.as_dict()
        texts.append(trade.text())
    if args.optimizers:
        opt = compare_optimizers(cfg, rounds=args.rounds or 10)
        out["optimizers"] = opt.as_dict()
        texts.append(opt.text())
    print(json.dumps(out, indent=2, default=str) if args.json else "\n\n".join(texts))
    return 0
