"""`workbench lab`: JupyterLab on the notebooks, on 127.0.0.1 with a token, and the URL it really
serves printed.

    workbench lab --dir notebooks --port 8888

The token travels in the server's environment (JUPYTER_TOKEN), never on its command line, where
every local user could read it in `ps`. When the asked port is busy Jupyter takes the next free
one, so the URL is read back from the server itself (the jpserver-PID.json file it writes into a
private runtime folder), not assumed. Jupyter writes that file before its loop binds the port, so the
URL is printed only once the port accepts a connection.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..net import accepts

START_TIMEOUT_S = 120.0


def add_parser(sub):
    p = sub.add_parser("lab", help="start JupyterLab on the notebooks (127.0.0.1, with a token)")
    p.add_argument("--dir", default="notebooks", help="folder to serve (default: notebooks)")
    p.add_argument(
        "--port",
        type=int,
        default=8888,
        help="first port to try (the next free one is "
        "used when it is busy; the printed URL names the one in use)",
    )
    return p


def lab_command(root: str, port: int) -> list[str]:
    """The server's command line: no token on it (the environment carries it)."""
    return [
        sys.executable,
        "-m",
        "jupyterlab",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--no-browser",
        f"--ServerApp.root_dir={root}",
    ] + (["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])


def server_info(runtime_dir: Path, pid: int) -> dict | None:
    """What the server with this pid wrote about itself (its port, url), once it has."""
    path = Path(runtime_dir) / f"jpserver-{pid}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def wait_for_server(proc: subprocess.Popen, runtime_dir: Path, timeout_s: float = START_TIMEOUT_S):
    """The server's own description once its port accepts connections; None if it exited or never
    got there."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        info = server_info(runtime_dir, proc.pid)
        if info and info.get("port") and accepts("127.0.0.1", info["port"]):
            return info
        time.sleep(0.2)
    return None


def main(args) -> int:
    from ..config import ConfigError

    root = Path(args.dir)
    if not root.is_dir():
        raise ConfigError(f"--dir {args.dir!r} is not a folder; give the folder of notebooks to serve")
    if not 0 < args.port < 65536:
        raise ConfigError(f"--port must be in 1..65535, got {args.port}")
    token = os.environ.get("JUPYTER_TOKEN") or secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="workbench-lab-") as runtime:  # mode 700: ours alone
        env = dict(os.environ, JUPYTER_TOKEN=token, JUPYTER_RUNTIME_DIR=runtime)
        proc = subprocess.Popen(lab_command(str(root), args.port), env=env)
        try:
            info = wait_for_server(proc, Path(runtime))
            if info is None:
                print("workbench lab: JupyterLab did not start (see its messages above)", file=sys.stderr)
                proc.terminate()
                return proc.wait() or 1
            port = info["port"]
            moved = "" if port == args.port else f" on port {port} (port {args.port} was busy)"
            # the last lines of the start: the URL alone on its line, to copy or click
            print(
                f"JupyterLab is ready{moved}. Open:\n\n    http://127.0.0.1:{port}/lab?token={token}\n",
                flush=True,
            )
            return proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
            return 0
