"""`workbench run`: train one config (one process or several with --nproc) and print its summary.

    workbench run --precision bf16 --json
    workbench run --nproc 2 --nnodes 2 --node-rank 0 --rdzv-endpoint node0:29400   # on each node

Ctrl-C stops every rank (the run is marked stopped, its events kept) and exits 130. A failed run
exits 1; a diverged one (every step ran, the loss ended NaN or infinite) exits 3.
"""

from __future__ import annotations

import json
import sys

from ..config import BUILTIN_MODELS, ConfigError, RunConfig, choices
from ..events import MEM_PEAK_GIB, MFU, RSS_GIB, SAMPLES_PER_S, WORLD_SIZE
from ..runstore import usable_run_dir

EXIT_DIVERGED = 3

FLAGS = {  # flag -> dotted config field (--model and --data: base_config)
    "precision": "precision.dtype",
    "steps": "run.steps",
    "budget_s": "run.time_budget_s",
    "batch_size": "loader.batch_size",
    "nproc": "distributed.nproc",
    "lr": "optim.lr",
    "device": "run.device",
    "seed": "run.seed",
    "label": "run.label",
    "nnodes": "distributed.nnodes",
    "node_rank": "distributed.node_rank",
    "rdzv_endpoint": "distributed.rdzv_endpoint",
    "backend": "distributed.backend",
    "max_restarts": "distributed.max_restarts",
    "oversubscribe": "run.oversubscribe",
    "strategy": "distributed.strategy",
}


MODELS = " | ".join([*BUILTIN_MODELS, "package.module:factory", "file.py:factory"])  # --model's help


def add_parser(sub):
    p = sub.add_parser(
        "run",
        help="train a config and print its summary",
        description="Train one config; exits non-zero with a one-line reason on failure.",
    )
    p.add_argument("--config", help="a RunConfig JSON file (default: the default preset)")
    p.add_argument("--preset", choices=["default", "smoke"], default="default")
    p.add_argument("--precision", help=" | ".join(choices("precision.dtype")))
    p.add_argument("--model", help=MODELS)
    add_data_args(p)
    p.add_argument("--steps", type=int, help="the most steps (run.steps)")
    p.add_argument(
        "--budget-s",
        type=float,
        help="end the run after this many seconds of steps (run.time_budget_s), or after --steps if sooner",
    )
    p.add_argument("--batch-size", type=int)
    p.add_argument("--nproc", type=int, help="processes (ranks) on this node, launched with torchrun")
    p.add_argument("--nnodes", type=int, help="machines in a multi-node run (needs --rdzv-endpoint)")
    p.add_argument("--node-rank", type=int, help="this machine's index, 0..nnodes-1")
    p.add_argument("--rdzv-endpoint", help="host:port of node 0, the same on every node")
    p.add_argument(
        "--backend", help=" | ".join(choices("distributed.backend")) + " (auto: nccl on GPUs, gloo on CPUs)"
    )
    p.add_argument("--max-restarts", type=int, help="restart every rank this many times on a failure")
    p.add_argument(
        "--strategy",
        help=" | ".join(choices("distributed.strategy"))
        + " (fsdp: FSDP2, each rank holds a shard of the model)",
    )
    p.add_argument("--lr", type=float)
    p.add_argument("--device", help=" | ".join(choices("run.device")))
    p.add_argument("--seed", type=int)
    p.add_argument("--label")
    p.add_argument(
        "--oversubscribe",
        action="store_true",
        default=None,
        help="run even when ranks x threads or loader workers outnumber this machine's "
        "cores (run.oversubscribe; slow, but allowed)",
    )
    add_set_arg(p)
    p.add_argument("--run-dir", help="folder for this run (default: a new one under runs/)")
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="go on from RUN_DIR's last saved state (it ran with run.save_every), with "
        "its config, in a new run folder; --steps can take it further",
    )
    p.add_argument(
        "--trust-code",
        action="store_true",
        help="with --resume: run the model/data factory RUN_DIR names even though this "
        "workbench did not create that folder here (read its code first)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    return p


def add_set_arg(p, what: str = "any config field") -> None:
    """`--set FIELD=JSON`, repeatable, the same flag in every command that builds a config."""
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=JSON",
        help=f"{what}, e.g. --set loader.num_workers=2 or --set data.seq_len=32 (repeatable)",
    )


def add_data_args(p) -> None:
    """--data and --data-factory: the data every command that trains takes, with --model."""
    p.add_argument("--data", help=" | ".join(choices("data.name")))
    p.add_argument("--data-factory", help="your Dataset's factory, with --data dataset")


def add_baseline_args(p, whose: str) -> None:
    """The config a comparing command starts from, for `whose` ("the baseline", "both sides"):
    --config or --preset, then --model, --data, --data-factory and --set, as base_config reads them."""
    p.add_argument("--config", help=f"a RunConfig JSON file: {whose}")
    p.add_argument("--preset", choices=["default", "smoke"], default="default")
    p.add_argument("--model", help=f"{MODELS} ({whose})")
    add_data_args(p)
    add_set_arg(p, f"a setting of {whose}")


def base_config(args, base: RunConfig | None = None) -> RunConfig:
    """The config a command starts from: `base`, else --config or --preset, with --model, --data
    and --data-factory applied (a model alone brings its matching data)."""
    if base is None:
        base = RunConfig.from_file(args.config) if args.config else getattr(RunConfig, args.preset)()
    data = {k: v for k, v in (("data.name", args.data), ("data.factory", args.data_factory)) if v}
    if args.model is not None:
        return base.with_model(args.model) if not data else base.replace(**{"model.name": args.model, **data})
    return base.replace(**data) if data else base


OWN_CONFIG = {"config": None, "model": None, "data": None, "data_factory": None}  # flags a run
# folder's own config stands for, with their unset values


def refuse_beside(args, what: str, unset: dict) -> None:
    """`what` brings its own config: the first of these flags set beside it (a value other than
    its unset one; None: any value) is refused in one line."""
    for flag, default in unset.items():
        value = getattr(args, flag, default)
        if value if default is None else value != default:
            raise ConfigError(f"{what}; drop --{flag.replace('_', '-')}")


def say_trust(prog: str, doing: str, run_dir, cfg: RunConfig, trust_code: bool, quiet: bool = False) -> None:
    """Refuse a run folder whose code the user has not trusted (workbench.train.trust), before
    anything of it is imported; else say on stderr what of it will run."""
    from ..train.trust import check_trust

    what = check_trust(run_dir, cfg, trust_code)
    if what and not quiet:
        print(f"{prog}: {doing} {run_dir}: {what}", file=sys.stderr, flush=True)


def resumed_config(args) -> RunConfig:
    """--resume RUN_DIR: that run's config, going on from its saved state (run.resume_from)."""
    refuse_beside(args, "--resume takes RUN_DIR's own config", {**OWN_CONFIG, "preset": "default"})
    from ..runfolder import RunFolder

    folder = RunFolder(args.resume)
    if not folder.holds_run():
        raise ConfigError(
            f"--resume {args.resume!r} is not a run folder (no "
            f"{folder.config_file.name}); pick one from `workbench runs`"
        )
    from ..train.state_index import check_saved_state

    check_saved_state(folder.path)  # damage told in a second, before torch is imported
    cfg = folder.config()
    say_trust("workbench run", "resuming", folder.path, cfg, args.trust_code)
    return cfg.replace(**{"run.resume_from": str(folder.path.resolve())})


def build_config(args) -> RunConfig:
    cfg = resumed_config(args) if getattr(args, "resume", None) else base_config(args)
    changes = {field: getattr(args, flag) for flag, field in FLAGS.items() if getattr(args, flag) is not None}
    changes.update(parse_settings(args.set, "--set"))
    return cfg.replace(**changes) if changes else cfg


def parse_settings(items: list[str], flag: str) -> dict:
    """FIELD=JSON items (a bare string is taken as a string: --set model.name=cnn)."""
    changes = {}
    for item in items:
        field, sep, raw = item.partition("=")
        if not sep or not field:
            raise ConfigError(f"{flag} needs FIELD=VALUE, got {item!r}")
        try:
            changes[field] = json.loads(raw)
        except json.JSONDecodeError:
            changes[field] = raw
        except RecursionError:
            raise ConfigError(
                f"{flag} {field}: its value is nested too deeply to read (a config value is a few "
                "levels of lists and objects)"
            ) from None
    return changes


def main(args) -> int:
    cfg = build_config(args)  # the input is checked before torch is imported: a refusal is quick
    if args.run_dir is not None:
        usable_run_dir(args.run_dir)
    from ..distributed.launch import start_run

    handle = start_run(cfg, args.run_dir)
    print(f"workbench run: {handle.run_dir}\n  {handle.shell_command}", file=sys.stderr, flush=True)
    for note in handle.notes:
        print(f"workbench run: note: {note}", file=sys.stderr, flush=True)
    try:
        handle.wait()
    except KeyboardInterrupt:
        handle.stop("stopped by Ctrl-C")  # every rank, within seconds
        print("workbench run: stopped by Ctrl-C; events kept", file=sys.stderr)
        return 130
    result = {"run_dir": str(handle.run_dir), "returncode": handle.returncode, **handle.summary()}
    status = result.get("status")
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print(format_summary(result))
    if result.get("traceback"):
        print(result["traceback"].rstrip(), file=sys.stderr)
    if status == "diverged":  # every step ran, but the loss is NaN or infinite
        print(f"workbench run: diverged: {result.get('message')} (see {result['run_dir']})", file=sys.stderr)
        return EXIT_DIVERGED
    if status != "completed":
        reason = result.get("message") or f"the run exited with code {result.get('returncode')}"
        cause = f" ({result['cause']})" if result.get("cause") else ""
        print(f"workbench run: {status}{cause}: {reason} (see {result['run_dir']})", file=sys.stderr)
        return 1
    return 0


def format_summary(result: dict) -> str:
    from ..machine.contention import busy_sentence

    keys = [
        "status",
        "run_dir",
        "device",
        "precision",
        WORLD_SIZE,
        "threads",
        "wait_policy",
        "threads_why",
        "steps",
        "ended_note",
        "restarted",
        "final_loss",
        "eval_loss",
        "eval_accuracy",
        "step_time_ms_median",
        SAMPLES_PER_S,
        "data_wait_frac",
        MFU,
        RSS_GIB,
        MEM_PEAK_GIB,
        "wall_s",
    ]
    width = max(map(len, keys))
    lines = []
    for k in keys:
        if k in result:
            v = result[k]
            lines.append(f"{k:<{width}}  {v:.4g}" if isinstance(v, float) else f"{k:<{width}}  {v}")
    c = result.get("contention") or {}
    if c:
        lines.append(f"{'other_cpu_cores':<{width}}  {c.get('other_cpu_cores')}")
    busy = busy_sentence(c)
    if busy:
        lines.append(f"machine busy: {busy}")
    if result.get("mfu_error"):
        lines.append(f"mfu: {result['mfu_error']}")
    return "\n".join(lines)
