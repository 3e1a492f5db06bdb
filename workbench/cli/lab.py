"""`workbench lab`: JupyterLab on the notebooks, on 127.0.0.1 with a token, URL printed."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path


def add_parser(sub):
    p = sub.add_parser("lab", help="start JupyterLab on the notebooks (127.0.0.1, with a token)")
    p.add_argument("--dir", default="notebooks", help="folder to serve (default: notebooks)")
    p.add_argument("--port", type=int, default=8888)
    return p


def lab_command(root: str, port: int, token: str) -> list[str]:
    return [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", f"--port={port}", "--no-browser",
            f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}"] + (
        ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])


def main(args) -> int:
    root = Path(args.dir)
    if not root.is_dir():
        print(f"workbench lab: --dir {args.dir!r} is not a folder", file=sys.stderr)
        return 2
    token = os.environ.get("JUPYTER_TOKEN") or secrets.token_hex(16)
    print(f"JupyterLab: http://127.0.0.1:{args.port}/lab?token={token}", flush=True)
    try:
        return subprocess.call(lab_command(str(root), args.port, token))
    except KeyboardInterrupt:
        return 0
