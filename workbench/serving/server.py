"""Run a served model: FastAPI under uvicorn, in this process, until Ctrl-C or SIGTERM.

    serve_forever(served, Settings(port=0, max_batch=8, max_wait_ms=5))

It binds 127.0.0.1 unless told otherwise, and anywhere else only with a token. The port is bound
here first (port 0: one the system picks), so the line that says where it serves is printed once
requests are taken and names the real port. Why FastAPI and uvicorn rather than a serving
framework: measured on a 2-core machine, a plain FastAPI endpoint answered a small MLP at 560
requests/s where a framework's worker processes and queues, competing with the server and the
client for the same cores, gave 163-306 (docs/serving.md).
"""

from __future__ import annotations

import os
import signal
import socket
import threading

import uvicorn

from .app import make_app
from .batching import Batcher
from .bounds import ConfigError, Settings
from .served import Served


def stop_when_stdin_closes() -> None:
    """The process that started this server holds the other end of stdin: when that closes (it
    stopped, restarted or died), this server stops as Ctrl-C would stop it."""

    def watch():  # the file descriptor, not sys.stdin: a buffered read held at exit aborts Python
        while os.read(0, 4096):
            pass
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, daemon=True, name="workbench-lifeline").start()


def bind(settings: Settings) -> socket.socket:
    # proto named: asyncio turns Nagle off (TCP_NODELAY) only on sockets whose proto says TCP, and
    # without it every keep-alive answer waited 40 ms for the client's delayed ACK
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
    except OSError as e:
        sock.close()
        raise ConfigError(
            f"--port {settings.port} on {settings.host} cannot be bound: {e.strerror}"
        ) from None
    sock.listen(2048)
    return sock


def serve_forever(served: Served, settings: Settings, threads_why: str = "", worker=None) -> None:
    """Serve until Ctrl-C or SIGTERM; the port is free when it returns. `worker`
    (serving.workers.Worker): serve on the socket the parent of `--workers` handed down."""
    sock = socket.socket(fileno=worker.fd) if worker is not None else bind(settings.check())
    port = sock.getsockname()[1]
    batching = settings.batching()
    about = settings.about(threads_why)
    if worker is not None:  # a load counts the parent's whole tree as the server's own work
        about.update(pid=worker.parent, worker=f"{worker.index + 1} of {worker.workers} (pid {os.getpid()})")

    def ready():  # the line naming the URL comes last: a starter reads up to it
        if served.note:
            print(f"{served.variant}: {served.note}", flush=True)
        if threads_why:
            print(f"threads: {threads_why}", flush=True)
        print(
            f"serving {served.name} ({served.variant}) at http://{settings.host}:{port} "
            f"(POST /predict, GET /health); batching {batching}",
            flush=True,
        )

    batcher = Batcher(served.forward, settings.max_batch, settings.max_wait_ms)
    app = make_app(served, batcher, about, settings.token, on_ready=ready)
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5)
    try:  # uvicorn ends the process with the signal that stopped it, once it has shut down
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
