"""The exported serve.py: the export's trained model over HTTP, plain torch with FastAPI and
uvicorn and no workbench import. It imports train.py beside it for the model, its data's shape and
the thread rule, and copies the workbench's own request checks, batching and HTTP app as source,
so the two servers cannot drift apart. int8 and pruned are left out: they are the compression
lab's conversions.
"""

from __future__ import annotations

import inspect

from ..serving import app as wb_app
from ..serving import batching as wb_batching
from ..serving import bounds as wb_bounds
from ..serving import served as wb_served
from ..serving import server as wb_server

EXPORTED_VARIANTS = ("eager", "compiled", "bf16")

HEADER = '''"""serve.py: this export's trained model over HTTP on 127.0.0.1, with dynamic batching.

    python train.py                                  # trains, and writes out/model.pt
    python serve.py --max-batch 8 --max-wait-ms 5    # POST /predict {{"inputs": [...]}}, GET /health

Plain torch, FastAPI and uvicorn (pip install fastapi uvicorn); no workbench import. The model, its
input and the thread count come from train.py beside it; the request checks, the batching and the
app are the workbench's own (`workbench serve`), copied. Variants: {variants}. The thread count is
the workbench's rule; how the threads wait is OpenMP's default unless OMP_WAIT_POLICY is set.
"""
from __future__ import annotations

import argparse
import asyncio
import copy
import ipaddress
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # train.py beside this file, whatever the working folder

import torch  # noqa: E402
import uvicorn  # noqa: E402
from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import default_collate  # noqa: E402

import train  # noqa: E402
from train import ConfigError  # noqa: E402

VARIANTS = {variants_tuple}
MAX_SAMPLES = {max_samples}
MAX_BODY = {max_body}
MAX_WAIT_MS = {max_wait_ms}
LOOPBACK = "127.0.0.1"
'''

MAIN = '''

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", default=str(HERE / "out" / "model.pt"),
                        help="the trained state dict (train.py writes out/model.pt)")
    parser.add_argument("--variant", default="eager", help=" | ".join(VARIANTS))
    parser.add_argument("--max-batch", type=int, default=1, help="samples one forward may gather (1: none)")
    parser.add_argument("--max-wait-ms", type=float, default=0.0, help="how long a batch waits to fill")
    parser.add_argument("--host", default=LOOPBACK, help="another address needs --token")
    parser.add_argument("--port", type=int, default=8700, help="0: any free port")
    parser.add_argument("--token", help="clients must send Authorization: Bearer TOKEN")
    parser.add_argument("--lifeline", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        settings = Settings(args.host, args.port, args.max_batch, args.max_wait_ms, args.token).check()
        if args.variant not in VARIANTS:
            raise ConfigError(f"--variant must be one of {', '.join(VARIANTS)}, got {args.variant!r}")
        if not Path(args.weights).is_file():
            raise ConfigError(f"--weights {args.weights!r} does not exist: run python train.py first")
        cfg = train.settings(train.CONFIG)
        chosen = train.choose_threads(cfg, train.other_cores_now() or 0.0)
        torch.set_num_threads(chosen.threads)
        data = train.build_data(cfg)
        model = train.build_model(cfg, data)
        try:
            model.load_state_dict(torch.load(args.weights, map_location="cpu", weights_only=True))
        except (RuntimeError, OSError, ValueError) as e:
            raise ConfigError(f"--weights {args.weights!r} does not fit the model: "
                              f"{str(e).splitlines()[0]}") from None
    except ConfigError as e:
        print(f"serve.py: {e}", file=sys.stderr)
        return 2
    x = default_collate([data.train[i] for i in range(2)])[0]
    served = Served(variant_model(model.eval(), args.variant), cfg.model.name, args.variant,
                    tuple(data.input_shape), x.dtype, data.task, data.num_classes)
    served.forward(x)  # a compiled variant compiles here, before serving
    if args.lifeline:
        stop_when_stdin_closes()
    waits = os.environ.get("OMP_WAIT_POLICY", "OpenMP's default")
    serve_forever(served, settings, threads_why=f"{chosen.threads} by the workbench's rule; wait: {waits}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
'''


def _source(*objects) -> str:
    return "\n\n\n".join(inspect.getsource(o).rstrip() for o in objects)


def serve_source() -> str:
    """The whole serve.py, as text."""
    header = HEADER.format(
        variants=", ".join(EXPORTED_VARIANTS),
        variants_tuple=repr(EXPORTED_VARIANTS),
        max_samples=wb_bounds.MAX_SAMPLES,
        max_body=wb_bounds.MAX_BODY,
        max_wait_ms=wb_bounds.MAX_WAIT_MS,
    )
    sections = [
        ("settings, checked as `workbench serve` checks them", _source(wb_bounds.Settings)),
        (
            "what is served, and each request read against its input",
            _source(wb_served.BadRequest, wb_served.Served, wb_served._all_ints, wb_served.variant_model),
        ),
        ("dynamic batching", _source(wb_batching.Waiting, wb_batching.Batcher)),
        ("the HTTP app", _source(wb_app.refuse, wb_app.read_body, wb_app.make_app)),
        ("running it", _source(wb_server.stop_when_stdin_closes, wb_server.bind, wb_server.serve_forever)),
    ]
    body = "".join(f"\n\n# ---- {title} {'-' * (92 - len(title))}\n{code}\n" for title, code in sections)
    return header + body + MAIN
