"""Processes kept ready so that Run does not wait for Python and torch to start: one spare run (a
supervisor in --warm mode with its warm worker, or its torchrun agent and warm ranks) shaped like
the last run, and one spare pre-launch check for the next config not measured yet.

    spares = Spares(lifelines)          # a Launcher holds one (workbench.distributed.launcher)
    spares.keep_warm(cfg)               # a run panel asks for this when it is shown
    spares.wait_ready(30)               # optional: until the spare has warmed up
    spare = spares.take(cfg, env)       # the launch: a spare that fits this run exactly, or None
    check = spares.check_process()      # the pre-launch check: the spare one, or a new one
    spares.stop()                       # end them all and keep none

Spares exist only in a launcher that asked for them (keep_warm), and are started only between
runs (when a run panel is shown and when a run ends), never while one goes, so their start-up
never shares the cores with a run's timed steps. A spare run is taken only by a run it fits: one
node, the same nproc and max_restarts, the same environment, working folder and interpreter; a
spare that does not fit the run being started is ended at once. Each spare is used once, and
`run.warm_worker = false` starts cold.

A busy machine changes the ranks' environment (workbench.machine.threads): the thread trial a rank
reads after its job is handed to the spare with the job, so it is no part of the fit; the OpenMP
wait policy is fixed when torch is imported, so a spare is started with the policy the machine
calls for now, and while it waits a watcher restarts it when the machine's load changes the policy
a launch would choose (twice in a row, so one busy second does not).

Several ranks keep torchrun as the engine: the spare is the ordinary torchrun command with the
warm worker as its program, so torchrun starts, rendezvouses and watches the ranks as always.
Every spare is owned like a run: its supervisor holds a lifeline from this process (closed when
this process dies: the spare sweeps its processes and removes its folder), and the spare check
reads its config on stdin (end-of-file when this process dies: it exits).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..config import RunConfig
from ..disk import open_log
from ..machine.allocator import allocator_env
from ..machine.contention import ContentionMeter
from ..machine.threads import TRIAL_ENV, WAIT_ENV, choose_threads, other_cores_now
from ..runfolder import RunFolder
from ..train.spare_rank import HANDED_ENV, ready_marker
from .owned import Lifelines
from .supervisor import SPARE_LOG
from .torchrun import WORKER, rank_command

PRECHECK = ["-m", "workbench.train.precheck", "-"]
WATCH_S = 1.0  # how often a waiting spare's wait policy is checked against the machine's load


def supervisor_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a run's supervisor (and so its ranks) starts with."""
    return dict(os.environ, **(extra or {}), PYTHONUNBUFFERED="1")


def precheck_env() -> dict[str, str]:
    """The pre-launch check's: one thread, like the measure it makes of a rank's base memory."""
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def new_check_process() -> subprocess.Popen:
    """A pre-launch check process waiting for its config on stdin."""
    return subprocess.Popen(
        [sys.executable, *PRECHECK],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=precheck_env(),
        start_new_session=True,
    )


def _fit(cfg: RunConfig, env: dict[str, str]) -> tuple | None:
    """What a spare must share with a run to take it; None: this run never takes one."""
    d = cfg.distributed
    if not cfg.run.warm_worker or d.nnodes != 1:
        return None
    shared = sorted((k, v) for k, v in env.items() if k not in HANDED_ENV)
    return d.nproc, d.max_restarts, sys.executable, os.getcwd(), tuple(shared)


def cold_reason(cfg: RunConfig, key: tuple | None, spare: Spare | None) -> str:
    """Why a run of `cfg` (whose fit is `key`) does not take `spare`, in words."""
    if not cfg.run.warm_worker:
        return "run.warm_worker is false"
    if key is None:
        return "a run of several nodes starts its ranks on each node"
    if spare is None:
        return "no spare was kept: a launcher keeps one for a shown run panel, started between runs"
    if not spare.alive():
        return "the spare had exited"
    names = ["distributed.nproc", "distributed.max_restarts", "the Python interpreter", "the working folder"]
    differ = [n for n, a, b in zip(names, key, spare.key) if a != b]
    env, spare_env = dict(key[-1]), dict(spare.key[-1])
    changed = sorted(k for k in env.keys() | spare_env.keys() if env.get(k) != spare_env.get(k))
    if changed:
        differ.append("the environment (" + ", ".join(changed[:3]) + (", ..." if changed[3:] else "") + ")")
    return "the spare was shaped for another run: " + ", ".join(differ)


def handed(env: dict[str, str]) -> dict[str, str]:
    """What a spare's ranks take from the run's environment with the job (train.spare_rank)."""
    return {k: env[k] for k in HANDED_ENV if k in env}


def threads_env_now(cfg: RunConfig, meter: ContentionMeter | None = None) -> dict[str, str]:
    """The threads' part of a launch's environment if `cfg` were launched now (a look of 0.2 s)."""
    return choose_threads(cfg, other_cores_now(meter)).env()


@dataclass
class Spare:
    """A started spare run, waiting for the launcher to name its run folder."""

    key: tuple
    folder: Path
    proc: subprocess.Popen  # its supervisor
    command: list[str]  # what the supervisor runs: the warm worker, or torchrun with warm ranks
    nproc: int
    lifelines: Lifelines
    config: RunConfig  # the run it is shaped like
    extra: dict[str, str]  # what that run added to the environment, but the threads' part
    wait_policy: str  # its ranks' OpenMP wait, fixed when they imported torch
    started_t: float = field(default_factory=time.time)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fits(self, key: tuple | None) -> bool:
        """Alive, and shaped for a run whose fit is `key` (None: that run never takes a spare)."""
        return key is not None and self.key == key and self.alive()

    def ready(self) -> bool:
        """Every rank has warmed up and waits for its job."""
        return all(ready_marker(self.folder, r).is_file() for r in range(self.nproc))

    def hand_over(self, run_dir: Path, env: dict[str, str]) -> bool:
        """Name the run, and what its ranks take from the run's environment `env`, on the lifeline;
        False when the spare has gone meanwhile."""
        job = {"run_dir": str(Path(run_dir).resolve()), "env": handed(env)}
        return self.alive() and self.lifelines.send(self.proc.pid, json.dumps(job) + "\n")

    def end(self) -> None:
        self.lifelines.release(self.proc.pid)  # its supervisor sweeps its processes and its folder

    def record(self) -> dict:
        return {
            "spare_pid": self.proc.pid,
            "spare_started_t": round(self.started_t, 4),
            "ready_when_taken": self.ready(),
            "spare_command": self.command,
            "spare_wait_policy": self.wait_policy,
        }


@dataclass
class _CheckSpare:
    env: dict
    proc: subprocess.Popen

    def fits(self) -> bool:
        return self.proc.poll() is None and self.env == precheck_env()


class Spares:
    """At most one spare run and one spare check, kept for one launcher."""

    def __init__(self, lifelines: Lifelines) -> None:
        self.lifelines = lifelines
        self._lock = threading.Lock()
        self._wanted = False
        self._going = 0  # runs started through `take` and not ended yet
        self._spare: Spare | None = None
        self._check: _CheckSpare | None = None
        self._watcher: threading.Thread | None = None
        self._shape: tuple[RunConfig, dict[str, str] | None] | None = None  # of the last spare asked for

    @property
    def spare(self) -> Spare | None:
        """The spare run kept now, if any."""
        return self._spare

    @property
    def check(self) -> subprocess.Popen | None:
        """The spare check process kept now, if any."""
        return self._check.proc if self._check else None

    def _start_spare(self, cfg: RunConfig, extra: dict[str, str], env: dict[str, str], key: tuple) -> Spare:
        folder = Path(tempfile.mkdtemp(prefix="workbench-spare-"))
        command = rank_command(
            cfg.distributed, [*WORKER, "--warm", str(folder)], str(RunFolder(folder).torchrun_logs)
        )  # moved into the run it takes
        with open_log(folder / SPARE_LOG) as log:
            proc = self.lifelines.start_supervisor(["--warm", str(folder)], command, log, env)
        policy = "passive" if env.get(WAIT_ENV, "").upper() == "PASSIVE" else "default"
        return Spare(key, folder, proc, command, cfg.distributed.nproc, self.lifelines, cfg, extra, policy)

    def _prepare(
        self, cfg: RunConfig, extra: dict[str, str] | None = None, threads: dict[str, str] | None = None
    ) -> None:
        """Have a spare run shaped like `cfg` and a spare check ready (called between runs only).
        The spare's environment: the last run's additions `extra`, with the threads' part a launch
        would choose now (`threads`, when it has just been read)."""
        if not self._wanted or self._going:
            return
        kept = {k: v for k, v in (extra or {}).items() if k not in (WAIT_ENV, TRIAL_ENV)}
        if _fit(cfg, {}) is not None and threads is None:
            threads = threads_env_now(cfg)
        env = supervisor_env({**allocator_env(cfg.run.allocator), **kept, **(threads or {})})
        key = _fit(cfg, env)
        with self._lock:
            if not self._wanted or self._going:
                return
            if key is not None:
                self._shape = (cfg, kept)
            spare = self._spare
            if key is not None and not (spare and spare.fits(key)):
                if spare is not None:
                    spare.end()
                self._spare = self._start_spare(cfg, kept, env, key)
            if not (self._check and self._check.fits()):
                if self._check is not None:
                    self._check.proc.stdin.close()  # end-of-file: it exits
                self._check = _CheckSpare(precheck_env(), new_check_process())

    def keep_warm(self, cfg: RunConfig | None = None) -> None:
        """From now on keep a spare run shaped like the last run and a spare check ready; with
        `cfg`, start them now, shaped like it (unless a run goes)."""
        self._wanted = True
        if cfg is not None:
            self._prepare(cfg)
        if self._watcher is None or not self._watcher.is_alive():
            self._watcher = threading.Thread(target=self._watch, name="workbench-spare-watch", daemon=True)
            self._watcher.start()

    def _watch(self) -> None:
        """While a spare waits, restart it when a launch would now choose another wait policy
        than its ranks run (two looks in a row), so that a change of the machine's load between
        runs does not leave a spare that no run fits."""
        meter, misses = ContentionMeter(), 0
        while self._wanted:
            time.sleep(WATCH_S)
            other = meter.read()["other_cpu_cores"]
            meter.restart()
            spare = self._spare
            if spare is None or self._going or not spare.alive():
                misses = 0
                continue
            now = choose_threads(spare.config, other)
            misses = misses + 1 if now.wait_policy != spare.wait_policy else 0
            if misses >= 2:
                misses = 0
                self._prepare(spare.config, spare.extra, now.env())

    def wait_ready(self, timeout_s: float = 60) -> bool:
        """Wait until the spare run has warmed up (what a person's pause before pressing Run gives
        it); False when there is none or it is not ready in time."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            spare = self._spare
            if spare is None or not spare.alive():
                return False
            if spare.ready():
                return True
            time.sleep(0.05)
        return False

    def would_take(self, cfg: RunConfig, env: dict[str, str]) -> Spare | None:
        """The spare that would take a run of `cfg` started with `env` now, without taking it."""
        spare = self._spare
        return spare if spare is not None and spare.fits(_fit(cfg, env)) else None

    def take(self, cfg: RunConfig, env: dict[str, str]) -> tuple[Spare | None, str]:
        """The spare run that fits `cfg` started with `env`, now this run's, or None and why the
        run starts cold. A spare that does not fit is ended, but a run that takes no spare leaves a
        ready one waiting (it sleeps, and the next run may fit it). Counts the run as going until
        `ended`."""
        key = _fit(cfg, env)
        with self._lock:
            self._going += 1
            spare = self._spare
            if key is None and spare is not None and spare.alive() and spare.ready():
                return None, cold_reason(cfg, None, spare)
            self._spare = None
        if spare is not None and spare.fits(key):
            return spare, ""
        why = cold_reason(cfg, key, spare)
        if spare is not None:
            spare.end()
        return None, why

    def ended(self, cfg: RunConfig, extra: dict[str, str] | None = None) -> None:
        """A run started through `take` has ended: start the next spares, shaped like it (`extra`:
        the environment it added), or like the last run that could take one, if nothing else goes."""
        with self._lock:
            self._going = max(0, self._going - 1)
            if _fit(cfg, {}) is None and self._shape is not None:
                cfg, extra = self._shape
        self._prepare(cfg, extra)

    def check_process(self) -> subprocess.Popen:
        """A pre-launch check process waiting for its config on stdin: the spare when it fits (it
        is replaced after the next run), else a new one."""
        with self._lock:
            spare, self._check = self._check, None
        if spare is not None and spare.fits():
            return spare.proc
        if spare is not None:
            spare.proc.stdin.close()
        return new_check_process()

    def stop(self) -> None:
        """End every spare now and keep none."""
        with self._lock:
            self._wanted = False
            spare, check = self._spare, self._check
            self._spare = self._check = None
        if spare is not None:
            spare.end()
            try:
                spare.proc.wait(10)
            except subprocess.TimeoutExpired:
                spare.proc.kill()
                spare.proc.wait()
        if check is not None:
            check.proc.stdin.close()
            try:
                check.proc.wait(10)
            except subprocess.TimeoutExpired:
                check.proc.kill()
                check.proc.wait()
