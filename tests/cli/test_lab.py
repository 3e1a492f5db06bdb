"""`workbench lab`: with the asked port busy, the printed URL names the port the server really
listens on; the token is not on any command line; the server listens on 127.0.0.1 only."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest

from workbench.net import free_port

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_lab_prints_the_real_port_and_keeps_the_token_off_the_command_line(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", free_port()))
    busy.listen(1)
    asked = busy.getsockname()[1]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("JUPYTER_TOKEN", None)
    for name in (
        "JUPYTER_CONFIG_DIR",
        "JUPYTER_DATA_DIR",
        "IPYTHONDIR",
        "JUPYTERLAB_SETTINGS_DIR",
        "JUPYTERLAB_WORKSPACES_DIR",
    ):
        env[name] = str(tmp_path / name.lower())
    lab = subprocess.Popen(
        [sys.executable, "-m", "workbench", "lab", "--dir", str(REPO / "notebooks"), "--port", str(asked)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        line = lab.stdout.readline()
        assert line.startswith("JupyterLab is ready") and f"port {asked} was busy" in line, line
        assert lab.stdout.readline() == "\n"
        url = lab.stdout.readline()  # the URL alone on its line
        found = re.fullmatch(r"    http://127\.0\.0\.1:(\d+)/lab\?token=([0-9a-f]{32})\n", url)
        assert found, url
        port, token = int(found.group(1)), found.group(2)
        assert port != asked
        with urllib.request.urlopen(
            urllib.request.Request(
                f"http://127.0.0.1:{port}/api/status", headers={"Authorization": f"token {token}"}
            ),
            timeout=20,
        ) as r:
            assert "started" in json.loads(r.read())
        family = [psutil.Process(lab.pid)] + psutil.Process(lab.pid).children(recursive=True)
        listening = set()
        for p in family:
            try:
                command = " ".join(p.cmdline())
                sockets = p.net_connections("inet")
            except psutil.NoSuchProcess:  # a short-lived helper that ended (or is a zombie) meanwhile
                continue
            assert token not in command, command
            listening |= {(c.laddr.ip, c.laddr.port) for c in sockets if c.status == psutil.CONN_LISTEN}
        assert ("127.0.0.1", port) in listening
        assert all(ip == "127.0.0.1" for ip, _ in listening), listening
    finally:
        busy.close()
        os.killpg(lab.pid, signal.SIGTERM)
        try:
            lab.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(lab.pid, signal.SIGKILL)


def test_the_url_waits_for_the_port_to_accept_not_for_the_server_file(tmp_path):
    """Jupyter writes its jpserver file before its loop binds the port: CI once read the URL and was
    refused. The file alone is not enough; a listening port is."""
    from workbench.cli.lab import wait_for_server

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        (tmp_path / f"jpserver-{proc.pid}.json").write_text(json.dumps({"port": port}))
        assert wait_for_server(proc, tmp_path, timeout_s=1.0) is None
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
            s.listen(1)
            assert wait_for_server(proc, tmp_path, timeout_s=30.0) == {"port": port}
    finally:
        proc.stdin.close()
        proc.wait(20)
