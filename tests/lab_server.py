"""A private JupyterLab server for the browser test: 127.0.0.1, a free port, a token, every
Jupyter/IPython directory in a temporary folder, its own process group, and a teardown that ends
the server, every kernel it started and every process those kernels started.

    with LabServer(root_dir, home) as lab: lab.url("01_mixed_precision.ipynb")
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from workbench.net import free_port

REPO = Path(__file__).resolve().parents[1]


class LabServer:
    def __init__(self, root_dir: Path, home: Path, extra_env: dict | None = None):
        self.root_dir, self.home = Path(root_dir), Path(home)
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen | None = None
        self.home.mkdir(parents=True, exist_ok=True)
        self.log_path = self.home / "jupyterlab.log"

    def env(self) -> dict:
        env = dict(os.environ, JUPYTER_TOKEN=self.token, PYTHONUNBUFFERED="1")
        for name in (
            "JUPYTER_CONFIG_DIR",
            "JUPYTER_DATA_DIR",
            "JUPYTER_RUNTIME_DIR",
            "IPYTHONDIR",
            "JUPYTERLAB_SETTINGS_DIR",
            "JUPYTERLAB_WORKSPACES_DIR",
        ):
            path = self.home / name.lower()
            path.mkdir(parents=True, exist_ok=True)
            env[name] = str(path)
        # the kernel must import this checkout's workbench (CI installs it editable as well)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p)
        env.update(self.extra_env)
        # every cell in the DOM, so the test can read every prompt
        tracker = Path(env["JUPYTERLAB_SETTINGS_DIR"]) / "@jupyterlab" / "notebook-extension"
        tracker.mkdir(parents=True, exist_ok=True)
        (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
        news = Path(env["JUPYTERLAB_SETTINGS_DIR"]) / "@jupyterlab" / "apputils-extension"
        news.mkdir(parents=True, exist_ok=True)  # no "get notified about news?" popup over the page
        (news / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))
        return env

    def start(self, timeout_s: float = 120) -> "LabServer":
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--no-browser",
            "--allow-root",
            f"--ServerApp.root_dir={self.root_dir}",
            "--ServerApp.port_retries=0",
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env(),
            cwd=self.root_dir,
            start_new_session=True,
        )
        log.close()
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                self.api("status")
                return self
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"JupyterLab did not answer in {timeout_s} s:\n{self.log_tail()}")

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def kernel_states(self) -> list[str]:
        """Each kernel's state. While a kernel starts, the server may answer the list with a 500
        (its model has no last activity yet): that reads as "starting", asked again next time."""
        try:
            return [k.get("execution_state", "") for k in self.api("kernels")]
        except urllib.error.HTTPError as e:
            if e.code == 500:
                return ["starting"]
            raise

    def url(self, notebook: str) -> str:
        return f"http://127.0.0.1:{self.port}/lab/tree/{notebook}?token={self.token}"

    def log_tail(self, n: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-n:] if self.log_path.exists() else ""

    def stop(self) -> list[int]:
        """End everything this server started; returns the pids that were still alive."""
        if self.proc is None:
            return []
        try:
            family = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            family = []
        try:  # kernels first, politely: they run in their own sessions
            for k in self.api("kernels"):
                self.api(f"kernels/{k['id']}", method="DELETE")
        except Exception:
            pass
        for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            for p in family:  # kernels and the runs they started have process groups of their own
                try:
                    os.killpg(p.pid, sig) if os.getpgid(p.pid) == p.pid else p.send_signal(sig)
                except (ProcessLookupError, psutil.Error):
                    pass
            try:
                self.proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                continue
            gone, alive = psutil.wait_procs(family, timeout=wait_s)
            if not alive:
                break
        return [p.pid for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]

    def __enter__(self) -> "LabServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
