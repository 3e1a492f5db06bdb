"""`workbench serve`: a model over HTTP on 127.0.0.1, until Ctrl-C.

    workbench serve runs/20260101-120000_mlp-fp32                 # a run's trained weights
    workbench serve --model examples/gpt2.py:build --data text --weights gpt2.pt
    workbench serve RUN --variant int8 --max-batch 8 --max-wait-ms 5 --port 0

Then POST {"inputs": [...]} to /predict, and drive it with `workbench load URL`.
"""

from __future__ import annotations

import argparse
import os
from functools import partial
from pathlib import Path

from ..config import ConfigError
from ..machine.threads import WAIT_ENV
from ..serving.workers import Worker, check_workers
from .prune import add_subject_args, subject_from_args


def add_parser(sub):
    p = sub.add_parser(
        "serve",
        help="serve a model over HTTP (POST /predict, GET /health) with dynamic batching",
        description="Serve a run's trained model, or your own, over HTTP on 127.0.0.1 until Ctrl-C.",
    )
    p.add_argument(
        "run",
        nargs="?",
        help="a run folder whose trained weights to serve, or an export folder (its out/model.pt)",
    )
    add_subject_args(p)
    for hidden in ("--eval", "--batch-sizes", "--rounds", "--json"):  # the compression lab's own
        p.set_defaults(**{hidden.lstrip("-").replace("-", "_"): None})
    p.add_argument("--weights", help="a state_dict file for --model (torch.save(model.state_dict()))")
    p.add_argument("--variant", default="eager", help="eager | compiled | bf16 | int8 | pruned | onnx")
    p.add_argument(
        "--amount",
        type=float,
        default=None,
        help="--variant pruned: the share of each hidden layer's units removed (default 0.5)",
    )
    p.add_argument("--max-batch", type=int, default=1, help="samples one forward may gather (1: no batching)")
    p.add_argument("--max-wait-ms", type=float, default=0.0, help="how long a batch waits to fill")
    p.add_argument("--host", default="127.0.0.1", help="another address needs --token")
    p.add_argument("--port", type=int, default=8700, help="0: any free port (the line printed names it)")
    p.add_argument("--token", help="clients must send Authorization: Bearer TOKEN")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes on one port, each with its own model; the usable cores are shared "
        "between them by the thread rule",
    )
    p.add_argument(
        "--replicas",
        type=int,
        help="copies of the model behind Ray Serve on a local Ray cluster (pip install "
        "'workbench[ray]'), the way to serve past one machine; the cores are shared as with --workers",
    )
    p.add_argument("--lifeline", action="store_true", help=argparse.SUPPRESS)  # stop when stdin closes
    p.add_argument("--worker", help=argparse.SUPPRESS)  # one of --workers: what its parent chose
    # servers started together (serving.process.serve_all) apply the thread rule to one reading of
    # the load, taken by their starter: read each at its own start, one could spin and one not
    p.add_argument("--load-seen", type=float, help=argparse.SUPPRESS)
    p.set_defaults(train_epochs=0)
    return p


def from_export(args: argparse.Namespace) -> None:
    """An export folder (`workbench export`): its config, and the weights its train.py wrote
    (out/model.pt), its paths read from the folder as its own commands read them."""
    folder = Path(args.run).resolve()
    if args.run_dir or args.config or args.model:
        raise ConfigError(f"{args.run} is an export: it names its own config and model")
    from ..runfolder import CONFIG, WEIGHTS

    weights = Path(args.weights) if args.weights else folder / "out" / WEIGHTS
    if not weights.is_file():
        raise ConfigError(
            f"export {args.run!r} has no trained weights at {weights}: run its train.py first "
            "(it writes out/model.pt), or give --weights"
        )
    args.config, args.weights, args.run = str(folder / CONFIG), str(weights.resolve()), None
    os.chdir(folder)  # the config names its copies of your code relative to the export


def main(args: argparse.Namespace) -> int:
    from ..serving.bounds import PRUNE_AMOUNT, VARIANTS, Settings

    settings = Settings(args.host, args.port, args.max_batch, args.max_wait_ms, args.token).check()
    if args.variant not in VARIANTS:
        raise ConfigError(f"--variant must be one of {', '.join(VARIANTS)}, got {args.variant!r}")
    if args.amount is not None and args.variant != "pruned":
        raise ConfigError(f"--amount is for --variant pruned, got --variant {args.variant}")
    amount = PRUNE_AMOUNT if args.amount is None else args.amount
    if not 0 < amount < 1:
        raise ConfigError(f"--amount must be between 0 and 1 (a share of each layer's units), got {amount:g}")
    check_workers(args.workers)
    if args.replicas is not None:
        from ..serving.replicas import check_replicas

        check_replicas(args.replicas, args.workers)
    worker = Worker.from_flag(args.worker) if args.worker else None
    if worker is None:
        worker = thread_plan(args.replicas or args.workers, args.load_seen)
        if args.workers > 1 or args.replicas:
            check_paths(args)  # before N processes each find a path missing
            if args.lifeline:
                from ..serving.server import stop_when_stdin_closes

                stop_when_stdin_closes()
            if args.replicas:
                from ..serving.replicas import serve_replicas

                served_of = partial(served_in_replica, worker_argv(args._argv), worker, os.getcwd())
                return serve_replicas(served_of, settings, worker, args.replicas)
            from ..serving.workers import serve_workers

            return serve_workers(worker_argv(args._argv), settings, worker, args.workers, os.getpid())
    served = served_from_args(args, worker, amount)

    from ..serving.server import serve_forever, stop_when_stdin_closes

    if args.lifeline:
        stop_when_stdin_closes()
    serve_forever(served, settings, worker.why, worker if args.worker else None)
    return 0


def check_paths(args: argparse.Namespace) -> None:
    """Every file or folder the flags name exists (a factory's file: its part before ':')."""
    named = {
        "RUN": args.run,
        "--run-dir": args.run_dir,
        "--config": args.config,
        "--weights": args.weights,
        "--data-path": args.data_path,
    }
    for flag in ("model", "data_factory", "eval"):
        value = getattr(args, flag, None)
        if value and value.split(":")[0].endswith(".py"):
            named[f"--{flag.replace('_', '-')}"] = value.split(":")[0]
    for flag, path in named.items():
        if path and not Path(path).exists():
            raise ConfigError(f"{flag} {path!r} does not exist")


def thread_plan(processes: int, load_seen: float | None) -> Worker:
    """The server's threads: the usable cores shared by its processes, as ranks share them; how
    they wait is chosen before torch loads (OpenMP reads it once, then)."""
    from ..config import RunConfig
    from ..machine.threads import choose_threads, other_cores_now

    cfg = RunConfig.smoke().replace(**{"distributed.nproc": processes})
    other = other_cores_now() if load_seen is None else load_seen
    choice = choose_threads(cfg, other).fixed()  # no warm-up to try others in
    many = f"{processes} server process{'es' if processes > 1 else ''}"
    each = "in each server process" if processes > 1 else "in the server"
    why = choice.why.replace("per rank", each).replace(f"shared by {processes} rank(s)", f"for {many}")
    return Worker(choice.threads, choice.wait_policy, why)


def served_in_replica(argv: list[str], plan: Worker, cwd: str):
    """The Served of `workbench serve ARGV`, built in a Ray Serve replica's process (the flags name
    paths as given where the command ran)."""
    from . import parser
    from ..serving.bounds import PRUNE_AMOUNT

    os.chdir(cwd)
    args = parser().parse_args(["serve", *argv])
    return served_from_args(args, plan, PRUNE_AMOUNT if args.amount is None else args.amount)


def served_from_args(args: argparse.Namespace, plan: Worker, amount: float):
    """The model `args` name, with its weights, in its variant, on `plan`'s threads (a Served)."""
    if plan.wait == "passive":
        os.environ.setdefault(WAIT_ENV, "PASSIVE")
    if args.run and (Path(args.run) / "serve.py").is_file():
        from_export(args)
    elif args.run:
        if args.run_dir:
            raise ConfigError("give the run folder once: RUN or --run-dir, not both")
        args.run_dir = args.run
    if args.weights and args.run_dir:
        raise ConfigError("--weights is for --model; a run folder serves its own weights")

    import torch  # after the cheap checks: a refusal answers at once

    from ..serving.served import build_served
    from ..train.restore import load_saved

    torch.set_num_threads(plan.threads)
    subject = subject_from_args(args)
    if args.weights:
        try:
            subject.model.load_state_dict(load_saved(args.weights))
        except RuntimeError as e:
            raise ConfigError(
                f"--weights {args.weights!r} does not fit the model: {str(e).splitlines()[0]}"
            ) from None
    return build_served(subject, args.variant, amount)


PARENTS_FLAGS = ("--workers", "--replicas", "--port", "--load-seen")  # each takes a value


def worker_argv(argv: list[str]) -> list[str]:
    """The command as typed after `serve`, less what the parent of --workers (or --replicas)
    decides itself: the processes, the port, the lifeline, and the load it read (each process is
    handed its threads instead)."""
    argv = argv[argv.index("serve") + 1 :] if "serve" in argv else list(argv)
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in PARENTS_FLAGS:
            skip = True
        elif not arg.startswith(tuple(f"{flag}=" for flag in PARENTS_FLAGS)) and arg != "--lifeline":
            out.append(arg)
    return out
