"""Plain FastAPI endpoints the serving benchmark measures the workbench's server against, each as
a tutorial would write it (run as a process of its own by tools/bench/serve.py):

    python -m tools.bench.serve_targets noop --port 0          # answers {} at once: the load's ceiling
    python -m tools.bench.serve_targets sleep --ms 5 --port 0   # a fixed service time: the load's honesty
    python -m tools.bench.serve_targets model --width 2048 --port 0   # one forward a request

Each prints the line the workbench's server prints once it takes requests, and stops when its
stdin closes, so the benchmark starts and stops them as it does its own servers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import sys
import threading
import time

from fastapi import FastAPI, Request  # at the top: the handlers' annotations are read from here


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["noop", "sleep", "model"])
    p.add_argument("--ms", type=float, default=5.0)
    p.add_argument("--set", action="append", default=[], help="config FIELD=JSON of the model")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--lifeline", action="store_true")
    args = p.parse_args(argv)

    import uvicorn

    app = FastAPI()
    health = {
        "status": "ok",
        "model": args.kind,
        "variant": "plain FastAPI",
        "batching": "off",
        "pid": os.getpid(),
        "input": {"shape": [1, 8, 8], "dtype": "float32"},
    }

    if args.kind == "model":
        import torch

        from workbench.cli.run import parse_settings
        from workbench.compress.subject import Subject
        from workbench.config import RunConfig

        subject = Subject.from_config(RunConfig.smoke().replace(**parse_settings(args.set, "--set")))
        model = subject.model.eval()
        health["input"] = {"shape": list(subject.input_shape), "dtype": "float32"}

        @app.post("/predict")
        def predict(body: dict):  # the tutorial's endpoint: a sync handler, one forward a request
            with torch.inference_mode():
                x = torch.tensor(body["inputs"], dtype=torch.float32).unsqueeze(0)
                return {"outputs": model(x)[0].tolist()}

    elif args.kind == "sleep":
        served_ms: list[float] = []  # what each request's service really took (a sleep oversleeps)

        @app.post("/predict")
        async def predict(request: Request):
            await request.body()
            t0 = time.perf_counter()
            await asyncio.sleep(args.ms / 1e3)
            served_ms.append((time.perf_counter() - t0) * 1e3)
            return {"outputs": []}

        @app.get("/served")
        async def served():
            return {"median_ms": statistics.median(served_ms) if served_ms else None, "count": len(served_ms)}

    else:

        @app.post("/predict")
        async def predict(request: Request):
            await request.body()
            return {"outputs": []}

    @app.get("/health")
    async def said():
        return health

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(2048)
    print(f"serving {args.kind} at http://127.0.0.1:{sock.getsockname()[1]} (plain FastAPI)", flush=True)
    if args.lifeline:

        def watch():
            while os.read(0, 4096):
                pass
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=watch, daemon=True).start()
    try:
        uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
