"""Start training runs as child processes and own them.

    python -c "from workbench.distributed.launch import run; from workbench import RunConfig; \
               print(run(RunConfig.smoke().replace(**{'distributed.nproc': 2})))"

One process: `python -m workbench.worker --config RUN_DIR/config.json`. Several: the same module
under `torchrun` (one node on 127.0.0.1 with a free port, or several nodes at a rendezvous
endpoint). Either way a supervisor process (workbench.distributed.supervisor) sits between this
process and the run: it sweeps every rank when the run is stopped, fails, stalls, or when this
process dies, and writes how the run ended into summary.json. The kernel (or CLI) never trains
in-process. Where a spare that fits the run is ready (workbench.distributed.warm: a run panel keeps
one), the run is handed to it instead and skips Python's and torch's start-up. Before anything is
written, `check_launch` refuses what this machine cannot run (workbench.distributed.limits, with
the model and data built once in a child process); the run folder is then claimed atomically, and
launch.json records the supervisor's pid and start time so readers can tell a live run from a
dead one.
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from ..config import ConfigError, RunConfig
from ..disk import Reserve, disk_message, write_atomic, write_json_atomic
from ..machine.capability import resolve_device
from ..machine.contention import ContentionMeter
from ..machine.fit import backend_for, cannot_run
from ..machine.threads import ThreadChoice, choose_threads, other_cores_now
from ..procs import created_time
from ..runstore import LAUNCH, create_run_dir, read_summary, runs_root
from ..train.data import check_data_paths
from ..train.factory import check_spec
from ..train.trust import named_code
from .faults import ended_by_supervisor, record_supervisor_death
from . import warm
from .limits import check_limits
from .owned import release, start_supervisor
from .torchrun import WORKER, rank_command


def resolve_backend(cfg: RunConfig) -> str:
    return backend_for(cfg, resolve_device(cfg.run.device))


def check_launch(cfg: RunConfig, folder: str | Path | None = None) -> list[str]:
    """Refuse a run this machine cannot start, before anything is written or spawned: the config,
    the device, the data paths, factories that name the standard library, the GPUs for nccl, then
    the machine's limits (workbench.distributed.limits: cores, memory, the batch, the disk) with the
    config's data and model built once in a child process. Returns notes to show the user."""
    return _check_launch(cfg, folder)[0]


def _check_launch(cfg: RunConfig, folder: str | Path | None) -> tuple[list[str], dict]:
    if not isinstance(cfg, RunConfig):
        raise ConfigError(f"the config must be a RunConfig (RunConfig.from_dict(d) builds one from a "
                          f"dict), got {type(cfg).__name__}")
    cfg.validate()
    device = resolve_device(cfg.run.device)
    check_data_paths(cfg)
    for field, spec, _ in named_code(cfg):
        check_spec(spec, field)
    reason = cannot_run(cfg, device)  # the one rule the planners and widgets ask too
    if reason:
        raise ConfigError(reason)
    return check_limits(cfg, device.type, Path(folder) if folder is not None else runs_root(cfg))


def worker_command(cfg: RunConfig, run_dir: Path) -> list[str]:
    """The exact command that runs this config: copy it to a terminal or a cluster job."""
    run_dir = Path(run_dir)
    return rank_command(cfg.distributed, [*WORKER, "--config", str(run_dir / "config.json")],
                        str(run_dir / "torchrun_logs"))


class RunHandle:
    """A started run: poll it, wait for it, stop it. Its events stay in `run_dir` whatever happens.
    `notes` says what the pre-launch check could not measure or was told to override."""

    def __init__(self, run_dir: Path, config: RunConfig, proc: subprocess.Popen, command: list[str],
                 notes: list[str] | None = None, threads: ThreadChoice | None = None,
                 env: dict[str, str] | None = None):
        self.run_dir, self.config, self.proc, self.command = run_dir, config, proc, command
        self.notes = notes or []
        self.threads = threads  # the threads and wait policy chosen for it, with the reason
        self.env = env or {}  # what it added to the ranks' environment
        self.started = time.time()
        self.stopped = False
        self._over = False

    @property
    def returncode(self) -> int | None:
        code = self.proc.poll()
        if code is not None:
            self._ended(code)
        return code

    @property
    def shell_command(self) -> str:
        return shlex.join(self.command)

    def running(self) -> bool:
        return self.returncode is None

    def wait(self, timeout: float | None = None) -> int:
        code = self.proc.wait(timeout)
        self._ended(code)
        return code

    def _ended(self, code: int) -> None:
        if self._over:
            return
        self._over = True
        release(self.proc.pid)
        if code < 0 and not ended_by_supervisor(self.run_dir):
            record_supervisor_death(self.run_dir, self.proc.pid, code)
        warm.ended(self.config, self.env)  # between runs: the next spare may start now

    def stop(self, reason: str = "stopped by the user", timeout_s: float = 8.0) -> int:
        """Stop every rank (SIGTERM, SIGKILL after 2 s); the run is marked stopped, events kept."""
        self.stopped = True
        if self.running():
            try:
                write_atomic(self.run_dir / "stop_reason.txt", reason)
            except OSError:
                pass  # a full disk: the supervisor still stops the run, with a plainer reason
            try:
                self.proc.send_signal(signal.SIGTERM)
                return self.wait(timeout_s)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
            release(self.proc.pid)  # a wedged supervisor: its lifeline closes, and it is killed
            self.proc.kill()
        return self.wait()

    def summary(self) -> dict:
        return read_summary(self.run_dir)

    def log_tail(self, n_chars: int = 2000) -> str:
        path = self.run_dir / "launcher.log"
        return path.read_text(errors="replace")[-n_chars:] if path.is_file() else ""


def start_run(cfg: RunConfig, run_dir: str | Path | None = None, root: str | Path | None = None,
              *, env: dict[str, str] | None = None, threads: ThreadChoice | None = None) -> RunHandle:
    """Validate, check the machine, claim the run folder, and start the worker(s) under a
    supervisor, or hand the run to a spare that fits it (workbench.distributed.warm). Returns at
    once. `env` adds environment variables for the ranks (OMP_NUM_THREADS). The ranks' threads and
    wait policy are chosen from what other programs use now (workbench.machine.threads), unless
    `threads` brings a choice made already (every run of a comparison's round shares one)."""
    meter = ContentionMeter()  # the checks below run meanwhile, in this process's tree
    target = Path(run_dir) if run_dir is not None else Path(root) if root is not None else None
    notes, need = _check_launch(cfg, target if target is not None else runs_root(cfg))  # nothing written
    threads = threads or choose_threads(cfg, other_cores_now(meter))
    env = {**threads.env(), **(env or {})}
    run_dir = create_run_dir(cfg, root, path=run_dir)  # atomic: a second start here is refused
    command = worker_command(cfg, run_dir)
    try:
        Reserve(run_dir).hold()  # room for summary.json even if the run fills the disk
        log = open(run_dir / "launcher.log", "ab")
    except OSError as e:
        raise ConfigError(disk_message(run_dir, e, "preparing the run folder")) from None
    supervisor_env = warm.supervisor_env(env)
    spare = warm.take(cfg, supervisor_env)  # from here the run counts as going
    try:
        with log:
            if spare is not None and spare.hand_over(run_dir):
                proc, how = spare.proc, {"warm": spare.record()}
            else:
                proc, how = start_supervisor(["--run-dir", str(run_dir)], command, log,
                                             supervisor_env), {}
    except BaseException:
        warm.ended(cfg, env)
        raise
    handle = RunHandle(run_dir, cfg, proc, command, notes, threads, env)
    try:  # who to look for: a reader tells a dead run from a live one by these pids
        write_json_atomic(run_dir / LAUNCH, {
            "t": round(time.time(), 4), "command": command, "supervisor_pid": proc.pid,
            "supervisor_created": created_time(proc.pid), "launcher_pid": os.getpid(),
            "launcher_created": created_time(), "notes": notes, "precheck": need,
            "threads": threads.as_dict(), **how})
    except OSError as e:
        handle.stop("the run folder could not be written")
        raise ConfigError(disk_message(run_dir / LAUNCH, e, "writing")) from None
    return handle


def run(cfg: RunConfig, run_dir: str | Path | None = None, timeout_s: float | None = None,
        *, env: dict[str, str] | None = None, threads: ThreadChoice | None = None) -> dict:
    """Start a run, wait for it, and return its summary (status says how it ended)."""
    handle = start_run(cfg, run_dir, env=env, threads=threads)
    try:
        handle.wait(timeout_s)
    except subprocess.TimeoutExpired:
        handle.stop(f"timed out after {timeout_s:g} s")
    except BaseException:
        handle.stop("interrupted (Ctrl-C)")
        raise
    return {"run_dir": str(handle.run_dir), "returncode": handle.returncode, **handle.summary()}
