"""A server in a process of its own, for a notebook, a comparison or a test (this module runs in
the process that starts it; the server itself is `workbench serve`).

    with ServerProcess(["runs/..._mlp-fp32", "--max-batch", "8"]) as server:
        server.url                     # http://127.0.0.1:PORT, the port the server chose
    # stopped: the process is gone and its port free
    servers = serve_all({"eager": [run], "int8": [run, "--variant", "int8"]})   # started at once
    with servers_running({"A": [run], "A again": [run]}) as servers: ...   # stopped at the end

The server holds the read end of a pipe (its stdin) and stops when it closes: a kernel that
restarts or dies takes its servers with it.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager

from ..config import ConfigError

# the line a server prints once it takes requests (serving.server.serve_forever; a plain endpoint of
# the benchmark names no batching): its starters read it with this
READY = re.compile(
    r"^(?P<name>serving .*?) at (?P<url>http://\S+) \([^)]*\)(?:; batching (?P<batching>.*))?$"
)
READY_TIMEOUT_S = 300.0  # building a compiled variant on a busy machine takes minutes


class ServerProcess:
    """`workbench serve ARGS` in a process of its own, on a port the system picks: `url` once it
    takes requests, `stop()` (or the end of a `with` block) to stop it and free the port. It also
    stops when the process that started it ends (its stdin closes).

    :param args: what `command` is given (a run folder and `workbench serve`'s options), before
        `--port 0 --lifeline`.
    :param env: environment variables added to this process's for the server; None: none added.
    :param ready_timeout_s: the longest wait, in seconds, for each line the server prints before the
        one naming its URL; a longer silence stops it with a ConfigError.
    :param command: what python runs, before `args` (default: `-m workbench serve`).
    :param wait: wait here until it takes requests; False: return at once and call `ready()` later.
    :param pass_fds: file descriptors the server inherits; (): none.
    """

    def __init__(
        self,
        args: list[str],
        env: dict | None = None,
        ready_timeout_s: float = READY_TIMEOUT_S,
        command: tuple[str, ...] = ("-m", "workbench", "serve"),
        wait: bool = True,
        pass_fds: tuple[int, ...] = (),
    ):
        """`command`: what python runs, given `args`, `--port 0` and `--lifeline`; it prints
        'serving ... at URL ' once it takes requests. `pass_fds`: descriptors it inherits (the
        listening socket of `serve --workers`)."""
        self.lines: list[str] = []  # what the server printed
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.proc = subprocess.Popen(
            [sys.executable, *command, *args, "--port", "0", "--lifeline"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
            start_new_session=True,  # Ctrl-C in a terminal reaches its starter, who stops it
            pass_fds=pass_fds,
        )
        threading.Thread(target=self._read, daemon=True, name="workbench-server-output").start()
        self.url = ""
        self.ready_timeout_s = ready_timeout_s
        if wait:
            self.ready()

    def ready(self) -> "ServerProcess":
        """Wait until it takes requests (its first line names its URL); stopped if it cannot."""
        try:
            self.url = self.url or self._wait_ready(self.ready_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _wait_ready(self, timeout_s: float) -> str:
        while True:
            try:
                line = self._lines.get(timeout=timeout_s)
            except queue.Empty:
                raise ConfigError(f"the server did not start within {timeout_s:g} s") from None
            if line is None:
                last = self.lines[-1] if self.lines else f"exit code {self.proc.wait()}"
                raise ConfigError(f"the server did not start: {last}")
            self.lines.append(line)
            if found := READY.match(line):
                return found["url"]

    def later_lines(self, timeout_s: float = 30.0) -> list[str]:
        """What it printed after the line naming its URL, to its end (call once it has ended,
        before `stop`, which closes its output)."""
        out = []
        try:
            while (line := self._lines.get(timeout=timeout_s)) is not None:
                out.append(line)
        except queue.Empty:
            pass
        return out

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace_s: float = 10.0) -> int:
        """Ctrl-C's signal, then SIGKILL after `grace_s`; returns the exit code."""
        if self.running():
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        code = self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        return code

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def serve_all(servers: dict[str, list[str]], env: dict | None = None) -> dict[str, ServerProcess]:
    """Several servers started at once (each builds its model meanwhile), returned once all take
    requests; if one cannot start, all are stopped and its line is raised. The load is read once,
    here, and every server chooses its threads from that reading: servers to be compared then differ
    only in what they were asked (read at each one's start, one could spin and another not).

    :param servers: name -> the arguments of its `workbench serve` (a run folder and options).
    :param env: environment variables added for every server; None: none added.
    """
    from ..machine.threads import other_cores_now

    seen = ["--load-seen", f"{other_cores_now():.3f}"]
    started = {name: ServerProcess([*args, *seen], env, wait=False) for name, args in servers.items()}
    try:
        for server in started.values():
            server.ready()
    except BaseException:
        stop_all(started)
        raise
    return started


def stop_all(servers: dict[str, ServerProcess]) -> dict[str, int]:
    """Stop every server; name -> its exit code."""
    return {name: server.stop() for name, server in servers.items()}


@contextmanager
def servers_running(servers: dict[str, list[str]], env: dict | None = None):
    """`serve_all` for a `with` block: every server stopped at its end."""
    started = serve_all(servers, env)
    try:
        yield started
    finally:
        stop_all(started)
