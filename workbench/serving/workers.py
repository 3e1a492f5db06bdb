"""`workbench serve --workers N`: N server processes taking requests from one listening socket
(this module runs in the parent, which never imports torch; each worker is `workbench serve` with
the socket handed down).

    serve_workers(argv, settings, Worker(threads=1, wait="default", why="..."), 2)

The parent binds the port (port 0: one the system picks) and starts the workers with the socket
open in them; the kernel gives each new connection to one worker. Each worker builds its own copy
of the model and runs the parent's thread choice (the usable cores shared by the workers), so
N workers x T threads fill the cores as N ranks do. The parent says where it serves once every
worker takes requests, and stops them all on Ctrl-C, SIGTERM, its starter's pipe closing, or one
worker ending; each worker also stops when the parent's pipe to it closes, so none outlives it.
"""

from __future__ import annotations

import json
import signal
import threading
from dataclasses import asdict, dataclass

from ..config import ConfigError
from .bounds import Settings
from .process import READY, ServerProcess

MAX_WORKERS = 16
POLL_S = 0.5  # how often the parent looks for a worker that ended on its own


@dataclass(frozen=True)
class Worker:
    """What the parent hands each worker (the hidden --worker flag, as JSON)."""

    threads: int
    wait: str  # default | passive
    why: str
    fd: int = -1
    index: int = 0
    workers: int = 1
    parent: int = 0

    def flag(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_flag(cls, text: str) -> "Worker":
        return cls(**json.loads(text))


def check_workers(n: int) -> int:
    if not 1 <= n <= MAX_WORKERS:
        raise ConfigError(f"--workers must be 1-{MAX_WORKERS}, got {n}")
    return n


def serve_workers(argv: list[str], settings: Settings, plan: Worker, workers: int, pid: int) -> int:
    """Start `workers` copies of `workbench serve argv` on one socket and serve until stopped;
    returns 0 when stopped, 1 when a worker ended on its own (named)."""
    from .server import bind

    sock = bind(settings.check())
    port = sock.getsockname()[1]
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    procs: list[ServerProcess] = []
    try:
        for i in range(workers):
            worker = Worker(plan.threads, plan.wait, plan.why, sock.fileno(), i, workers, pid)
            procs.append(
                ServerProcess([*argv, "--worker", worker.flag()], pass_fds=(sock.fileno(),), wait=False)
            )
        for proc in procs:
            proc.ready()
        first = procs[0].lines
        for line in first[:-1]:  # what the variant converted, once (the threads are said below)
            if not line.startswith("threads: "):
                print(line, flush=True)
        print(f"threads: {plan.why}", flush=True)
        ready = READY.match(first[-1])
        print(
            f"{ready['name']} at http://{settings.host}:{port} (POST /predict, GET /health); "
            f"batching {ready['batching']}; "
            f"{workers} worker processes (pids {', '.join(str(p.proc.pid) for p in procs)})",
            flush=True,
        )
        while not stop.wait(POLL_S):
            ended = next((p for p in procs if not p.running()), None)
            if ended is not None:
                print(
                    f"worker {procs.index(ended)} (pid {ended.proc.pid}) ended with code "
                    f"{ended.proc.wait()}: stopping the others",
                    flush=True,
                )
                return 1
        return 0
    finally:
        for proc in procs:
            proc.stop()
        sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
