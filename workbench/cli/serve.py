"""`workbench serve`: a model over HTTP on 127.0.0.1, until Ctrl-C.

    workbench serve runs/20260101-120000_mlp-fp32                 # a run's trained weights
    workbench serve --model examples/gpt2.py:build --data text --weights gpt2.pt
    workbench serve RUN --variant int8 --max-batch 8 --max-wait-ms 5 --port 0

Then POST {"inputs": [...]} to /predict, and drive it with `workbench load URL`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..config import ConfigError
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
    p.add_argument("--variant", default="eager", help="eager | compiled | bf16 | int8")
    p.add_argument("--max-batch", type=int, default=1, help="samples one forward may gather (1: no batching)")
    p.add_argument("--max-wait-ms", type=float, default=0.0, help="how long a batch waits to fill")
    p.add_argument("--host", default="127.0.0.1", help="another address needs --token")
    p.add_argument("--port", type=int, default=8700, help="0: any free port (the line printed names it)")
    p.add_argument("--token", help="clients must send Authorization: Bearer TOKEN")
    p.add_argument("--lifeline", action="store_true", help=argparse.SUPPRESS)  # stop when stdin closes
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
    from ..serving.bounds import VARIANTS, Settings

    settings = Settings(args.host, args.port, args.max_batch, args.max_wait_ms, args.token).check()
    if args.variant not in VARIANTS:
        raise ConfigError(f"--variant must be one of {', '.join(VARIANTS)}, got {args.variant!r}")
    if args.run and (Path(args.run) / "serve.py").is_file():
        from_export(args)
    elif args.run:
        if args.run_dir:
            raise ConfigError("give the run folder once: RUN or --run-dir, not both")
        args.run_dir = args.run
    if args.weights and args.run_dir:
        raise ConfigError("--weights is for --model; a run folder serves its own weights")

    # one server process: its threads are the usable cores, as a lone rank's are, and how they
    # wait is chosen before torch loads (OpenMP reads it once, then)
    from ..config import RunConfig
    from ..machine.threads import WAIT_ENV, choose_threads, other_cores_now

    choice = choose_threads(RunConfig.smoke(), other_cores_now()).fixed()  # no warm-up to try others in
    if choice.wait_policy == "passive":
        os.environ.setdefault(WAIT_ENV, "PASSIVE")

    import torch  # after the cheap checks: a refusal answers at once

    from ..serving.served import build_served
    from ..serving.server import serve_forever, stop_when_stdin_closes
    from ..train.restore import load_saved

    torch.set_num_threads(choice.threads)
    subject = subject_from_args(args)
    if args.weights:
        try:
            subject.model.load_state_dict(load_saved(args.weights))
        except RuntimeError as e:
            raise ConfigError(
                f"--weights {args.weights!r} does not fit the model: {str(e).splitlines()[0]}"
            ) from None
    served = build_served(subject, args.variant)
    if args.lifeline:
        stop_when_stdin_closes()
    serve_forever(
        served,
        settings,
        threads_why=choice.why.replace("per rank", "in the server").replace(
            "shared by 1 rank(s)", "for 1 server process"
        ),
    )
    return 0
