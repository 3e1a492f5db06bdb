"""Start training runs as child processes and own them.

One process: `python -m workbench.worker --config RUN_DIR/config.json`. Several: the same module
under `torchrun`. The kernel (or CLI) never trains in-process, so a crash cannot take it down and
device memory is released between runs.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .config import ConfigError, RunConfig
from .runstore import create_run_dir, read_summary


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def worker_command(cfg: RunConfig, run_dir: Path) -> list[str]:
    """The exact command that runs this config: copy it to a terminal or a cluster job."""
    config = str(run_dir / "config.json")
    d = cfg.distributed
    if d.world_size == 1:
        return [sys.executable, "-m", "workbench.worker", "--config", config]
    if d.nnodes == 1:
        endpoint, local = f"127.0.0.1:{free_port()}", ["--local-addr", "127.0.0.1"]
    else:
        endpoint, local = d.rdzv_endpoint, []
    return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={d.nnodes}",
            f"--nproc-per-node={d.nproc}", f"--node-rank={d.node_rank}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}", *local, f"--max-restarts={d.max_restarts}",
            f"--log-dir={run_dir / 'torchrun_logs'}", "-m", "workbench.worker", "--config", config]


class RunHandle:
    """A started run: poll it, wait for it, stop it. Its events stay in `run_dir` whatever happens."""

    def __init__(self, run_dir: Path, config: RunConfig, proc: subprocess.Popen, command: list[str]):
        self.run_dir, self.config, self.proc, self.command = run_dir, config, proc, command
        self.started = time.time()
        self.stopped = False

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    def stop(self, grace_s: float = 3.0) -> int:
        """SIGTERM the whole process group, then SIGKILL whatever is left after `grace_s`."""
        self.stopped = True
        if self.running():
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                return self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(self.proc.pid, signal.SIGKILL)
        return self.proc.wait()

    def summary(self) -> dict:
        return read_summary(self.run_dir)

    def log_tail(self, n_chars: int = 2000) -> str:
        path = self.run_dir / "launcher.log"
        return path.read_text(errors="replace")[-n_chars:] if path.is_file() else ""


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def start_run(cfg: RunConfig, run_dir: str | Path | None = None, root: str | Path | None = None
              ) -> RunHandle:
    """Validate, make the run folder, and start the worker(s). Returns at once."""
    from .precision import check_supported, resolve_device

    cfg.validate()
    check_supported(cfg, resolve_device(cfg.run.device))  # refuse before anything is written
    if run_dir is None:
        run_dir = create_run_dir(cfg, root)
    else:
        run_dir = Path(run_dir)
        if (run_dir / "config.json").exists():
            raise ConfigError(f"run dir {str(run_dir)!r} already holds a run; choose a new folder")
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg.save(run_dir / "config.json")
    command = worker_command(cfg, run_dir)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    log = open(run_dir / "launcher.log", "ab")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)  # its own group: stop() reaches every rank
    log.close()
    return RunHandle(run_dir, cfg, proc, command)


def run(cfg: RunConfig, run_dir: str | Path | None = None, timeout_s: float | None = None) -> dict:
    """Start a run, wait for it, and return its summary (status says how it ended)."""
    handle = start_run(cfg, run_dir)
    try:
        handle.wait(timeout_s)
    except subprocess.TimeoutExpired:
        handle.stop()
    except BaseException:
        handle.stop()
        raise
    return {"run_dir": str(handle.run_dir), "returncode": handle.returncode, **handle.summary()}
