"""Start training runs as child processes and own them.

    python -c "from workbench.distributed.launch import run; from workbench import RunConfig; \
               print(run(RunConfig.smoke().replace(**{'distributed.nproc': 2})))"

One process: `python -m workbench.worker --config RUN_DIR/config.json`. Several: the same module
under `torchrun` (one node on 127.0.0.1 with a free port, or several nodes at a rendezvous
endpoint). Either way a supervisor process (workbench.distributed.supervisor) sits between this
process and the run: it sweeps every rank when the run is stopped, fails, stalls, or when this
process dies, and writes how the run ended into summary.json. The kernel (or CLI) never trains
in-process.
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from ..config import ConfigError, RunConfig
from ..machine.capability import resolve_device
from ..net import LOOPBACK, free_port, is_loopback
from ..runstore import create_run_dir, read_summary, write_json_atomic
from ..train.data import check_data_paths
from ..train.precision import check_supported
from ..train.rank import backend_for
from .torchrun import RESTART_ENV, WORKER, loopback_env, loopback_runner, torchrun_args

_OWNED: dict[int, int] = {}  # supervisor pid -> write end of its lifeline pipe


def resolve_backend(cfg: RunConfig) -> str:
    return backend_for(cfg, resolve_device(cfg.run.device))


def check_launch(cfg: RunConfig) -> None:
    """Refuse a run this machine cannot start, before anything is written or spawned."""
    cfg.validate()
    device = resolve_device(cfg.run.device)
    check_supported(cfg, device)
    check_data_paths(cfg)
    d = cfg.distributed
    if resolve_backend(cfg) == "nccl":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus == 0:
            raise ConfigError("distributed.backend 'nccl' needs CUDA GPUs, found none; "
                              "use 'gloo' (or 'auto') on a CPU")
        if d.nproc > gpus:
            raise ConfigError(f"distributed.nproc must be <= {gpus} (the GPUs on this node) with "
                              f"backend nccl, got {d.nproc}; use fewer processes or backend 'gloo'")


def worker_command(cfg: RunConfig, run_dir: Path) -> list[str]:
    """The exact command that runs this config: copy it to a terminal or a cluster job."""
    run_dir = Path(run_dir)
    program = [*WORKER, "--config", str(run_dir / "config.json")]
    d = cfg.distributed
    if d.world_size == 1:
        return [sys.executable, *program]
    endpoint = f"{LOOPBACK}:{free_port()}" if d.nnodes == 1 else d.rdzv_endpoint
    local = is_loopback(endpoint.rpartition(":")[0])  # one node, or nodes simulated on this machine
    env = loopback_env() if local else dict(RESTART_ENV)
    runner = loopback_runner() if local else [sys.executable, "-m", "torch.distributed.run"]
    return ["env", *(f"{k}={v}" for k, v in env.items()),
            *torchrun_args(program, nproc=d.nproc, nnodes=d.nnodes, node_rank=d.node_rank,
                           endpoint=endpoint, max_restarts=d.max_restarts,
                           log_dir=str(run_dir / "torchrun_logs"), runner=runner)]


class RunHandle:
    """A started run: poll it, wait for it, stop it. Its events stay in `run_dir` whatever happens."""

    def __init__(self, run_dir: Path, config: RunConfig, proc: subprocess.Popen, command: list[str]):
        self.run_dir, self.config, self.proc, self.command = run_dir, config, proc, command
        self.started = time.time()
        self.stopped = False

    @property
    def returncode(self) -> int | None:
        code = self.proc.poll()
        if code is not None:
            _release(self.proc.pid)
        return code

    @property
    def shell_command(self) -> str:
        return shlex.join(self.command)

    def running(self) -> bool:
        return self.returncode is None

    def wait(self, timeout: float | None = None) -> int:
        code = self.proc.wait(timeout)
        _release(self.proc.pid)
        return code

    def stop(self, reason: str = "stopped by the user", timeout_s: float = 8.0) -> int:
        """Stop every rank (SIGTERM, SIGKILL after 2 s); the run is marked stopped, events kept."""
        self.stopped = True
        if self.running():
            (self.run_dir / "stop_reason.txt").write_text(reason)
            try:
                self.proc.send_signal(signal.SIGTERM)
                return self.wait(timeout_s)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
            _release(self.proc.pid)  # a wedged supervisor: its lifeline closes, and it is killed
            self.proc.kill()
        return self.wait()

    def summary(self) -> dict:
        return read_summary(self.run_dir)

    def log_tail(self, n_chars: int = 2000) -> str:
        path = self.run_dir / "launcher.log"
        return path.read_text(errors="replace")[-n_chars:] if path.is_file() else ""


def _release(pid: int) -> None:
    fd = _OWNED.pop(pid, None)
    if fd is not None:
        os.close(fd)


def start_run(cfg: RunConfig, run_dir: str | Path | None = None, root: str | Path | None = None,
              *, env: dict[str, str] | None = None) -> RunHandle:
    """Validate, make the run folder, and start the worker(s) under a supervisor. Returns at once.
    `env` adds environment variables for the ranks (OMP_NUM_THREADS, say)."""
    check_launch(cfg)  # refuse before anything is written
    if run_dir is None:
        run_dir = create_run_dir(cfg, root)
    else:
        run_dir = Path(run_dir)
        if (run_dir / "config.json").exists():
            raise ConfigError(f"run dir {str(run_dir)!r} already holds a run; choose a new folder")
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg.save(run_dir / "config.json")
    command = worker_command(cfg, run_dir)
    read_fd, write_fd = os.pipe()  # the lifeline: end-of-file tells the supervisor we died
    write_json_atomic(run_dir / "launch.json", {"t": round(time.time(), 4), "command": command})
    supervisor = [sys.executable, "-m", "workbench.distributed.supervisor", "--run-dir", str(run_dir),
                  "--parent-fd", str(read_fd), "--", *command]
    env = dict(os.environ, **(env or {}), PYTHONUNBUFFERED="1")
    with open(run_dir / "launcher.log", "ab") as log:
        proc = subprocess.Popen(supervisor, stdout=log, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, pass_fds=(read_fd,),
                                start_new_session=True)  # Ctrl-C in a terminal reaches us only
    os.close(read_fd)
    _OWNED[proc.pid] = write_fd
    return RunHandle(run_dir, cfg, proc, command)


def run(cfg: RunConfig, run_dir: str | Path | None = None, timeout_s: float | None = None,
        *, env: dict[str, str] | None = None) -> dict:
    """Start a run, wait for it, and return its summary (status says how it ended)."""
    handle = start_run(cfg, run_dir, env=env)
    try:
        handle.wait(timeout_s)
    except subprocess.TimeoutExpired:
        handle.stop(f"timed out after {timeout_s:g} s")
    except BaseException:
        handle.stop("interrupted (Ctrl-C)")
        raise
    return {"run_dir": str(handle.run_dir), "returncode": handle.returncode, **handle.summary()}
