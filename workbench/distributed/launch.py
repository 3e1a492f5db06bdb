"""Start training runs as child processes and own them: a Launcher, one per kernel or CLI process.

    launcher = Launcher()                  # or launcher(): this process's own
    plan = launcher.plan(cfg)              # every check, once; threads chosen; whether a spare takes it
    handle = launcher.start(plan)          # handle.command: what actually ran
    launcher.close()                       # end its spares (a process's own ends with the process)

    start_run(cfg) / run(cfg) / check_launch(cfg)   # the same with this process's launcher

One process: `python -m workbench.worker --config RUN_DIR/config.json`. Several: the same module
under `torchrun` (one node on 127.0.0.1 with a free port, or several nodes at a rendezvous
endpoint). Either way a supervisor process (workbench.distributed.supervisor) sits between this
process and the run: it sweeps every rank when the run is stopped, fails, stalls, or when this
process dies, and writes how the run ended into summary.json. The kernel (or CLI) never trains
in-process. Where a spare that fits the run is ready (workbench.distributed.warm: a run panel keeps
one), the run is handed to it instead and skips Python's and torch's start-up. Before anything is
written, the plan refuses what this machine cannot run (workbench.distributed.limits, with
the model and data built once in a child process); the run folder is then claimed atomically, and
launch.json records the supervisor's pid and start time so readers can tell a live run from a
dead one.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..config import ConfigError, RunConfig, require_config
from ..disk import Reserve, disk_message, open_log
from ..machine.allocator import allocator_env
from ..machine.capability import resolve_device
from ..machine.contention import ContentionMeter
from ..machine.fit import backend_for, cannot_run
from ..machine.threads import ThreadChoice, choose_threads, other_cores_now
from ..procs import created_time
from ..runfolder import RESUME, RunFolder
from ..provenance import named_code
from ..runstore import create_run_dir, read_summary, runs_root, usable_run_dir
from ..train.data import check_data_paths
from ..train.factory import check_spec
from .faults import ended_by_supervisor, record_supervisor_death
from .limits import Prechecks, check_limits
from .owned import Lifelines
from .warm import Spare, Spares, supervisor_env
from .torchrun import WORKER, rank_command


def resolve_backend(cfg: RunConfig) -> str:
    return backend_for(cfg, resolve_device(cfg.run.device))


def worker_command(cfg: RunConfig, run_dir: Path) -> list[str]:
    """The exact command that runs this config cold: copy it to a terminal or a cluster job."""
    folder = RunFolder(run_dir)
    return rank_command(
        cfg.distributed, [*WORKER, "--config", str(folder.config_file)], str(folder.torchrun_logs)
    )


@dataclass
class LaunchPlan:
    """A run that passed every pre-launch check, not started yet: what the launcher will start."""

    config: RunConfig
    notes: list[str]  # what the pre-launch check overrode or could not measure
    precheck: dict  # what building the model and data in a child process measured
    threads: ThreadChoice  # the ranks' threads and wait policy, with the reason
    env: dict[str, str]  # what it adds to the ranks' environment
    run_dir: Path | None  # the folder asked for; None: a fresh one under `root`
    root: Path | None
    spare_command: list[str] | None = None  # the spare that would take it now; None: it starts cold

    @property
    def warm(self) -> bool:
        """Whether a spare that fits it was ready when it was planned (it may still start cold, if
        the spare has gone by then: the handle says what ran)."""
        return self.spare_command is not None


class RunHandle:
    """A started run: poll it, wait for it, stop it. Its events stay in `run_dir` whatever happens.
    `command` is what ran (a spare's, when a spare took the run); `notes` says what the pre-launch
    check could not measure or was told to override."""

    def __init__(
        self,
        run_dir: Path,
        config: RunConfig,
        proc: subprocess.Popen,
        command: list[str],
        notes: list[str] | None = None,
        threads: ThreadChoice | None = None,
        env: dict[str, str] | None = None,
        launcher: "Launcher | None" = None,
        warm: bool = False,
    ):
        self.run_dir, self.config, self.proc, self.command = run_dir, config, proc, command
        self.notes = notes or []
        self.threads = threads  # the threads and wait policy chosen for it, with the reason
        self.env = env or {}  # what it added to the ranks' environment
        self.warm = warm  # a spare took it
        self.launcher = launcher
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
        if self.launcher is not None:
            self.launcher.lifelines.release(self.proc.pid)
        if code < 0 and not ended_by_supervisor(self.run_dir):
            record_supervisor_death(self.run_dir, self.proc.pid, code)
        if self.launcher is not None:
            self.launcher.spares.ended(self.config, self.env)  # between runs: the next spare may start

    def stop(self, reason: str = "stopped by the user", timeout_s: float = 8.0) -> int:
        """Stop every rank (SIGTERM, SIGKILL after 2 s); the run is marked stopped, events kept."""
        self.stopped = True
        if self.running():
            try:
                RunFolder(self.run_dir).ask_stop(reason)
            except OSError:
                pass  # a full disk: the supervisor still stops the run, with a plainer reason
            try:
                self.proc.send_signal(signal.SIGTERM)
                return self.wait(timeout_s)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
            if self.launcher is not None:  # a wedged supervisor: its lifeline closes, it is killed
                self.launcher.lifelines.release(self.proc.pid)
            self.proc.kill()
        return self.wait()

    def summary(self) -> dict:
        return read_summary(self.run_dir)

    def log_tail(self, n_chars: int = 2000) -> str:
        return RunFolder(self.run_dir).log_tail(n_chars)


def check_resume_from(cfg: RunConfig) -> None:
    """run.resume_from names a folder that holds a saved state of any strategy, whole and readable
    (config validation reads no disk; this does, before anything is made)."""
    source = cfg.run.resume_from
    if not source:
        return
    from ..train.state_index import check_saved_state, refuse_nothing_to_train

    check_saved_state(source)  # an earlier version's state is named first: it is not "none"
    if not RunFolder(source).holds_resumable_state():
        raise ConfigError(
            f"run.resume_from {source!r} holds no resumable state (a whole step in "
            f"{RESUME}/): resume a run that had run.save_every > 0"
        )
    refuse_nothing_to_train(max(RunFolder(source).saved_steps()), cfg.run.steps)


def check_saves_are_shared(cfg: RunConfig) -> None:
    """A restart resumes only where every rank reads the saved state: a node started here writes
    a run folder of its own, so no folder would hold every rank's part of the state."""
    if cfg.run.save_every and cfg.distributed.nnodes > 1:
        raise ConfigError(
            f"run.save_every={cfg.run.save_every} with distributed.nnodes="
            f"{cfg.distributed.nnodes} is not allowed here: each node started this way "
            "keeps its own run folder, so none holds every rank's part of the saved state "
            "and a restart could not resume; submit it as one SLURM job "
            "(workbench submit: every node shares its run folder), or set run.save_every=0"
        )


class Launcher:
    """Starts runs and owns what they leave between them: the supervisors' lifelines, the spares
    (workbench.distributed.warm) and the pre-launch check's answers. One per kernel or CLI process
    (`launcher()`); a test makes a fresh one and closes it.

    :param prechecks: where the pre-launch check's answers are kept and reused; None: a new store.
    """

    def __init__(self, prechecks: Prechecks | None = None) -> None:
        self.lifelines = Lifelines()
        self.spares = Spares(self.lifelines)
        self.prechecks = prechecks or Prechecks()  # answers kept by what they depend on

    def keep_warm(self, cfg: RunConfig | None = None) -> None:
        """From now on keep a spare run and a spare check ready (workbench.distributed.warm), so
        that the next run skips Python's and torch's start-up.

        :param cfg: start the spares now, shaped like this config (unless a run is going); None: they
            start after the next run ends, shaped like it.
        """
        self.spares.keep_warm(cfg)

    def wait_ready(self, timeout_s: float = 60) -> bool:
        return self.spares.wait_ready(timeout_s)

    def close(self) -> None:
        """End every spare and keep none (runs it started go on; their lifelines stay)."""
        self.spares.stop()

    def precheck(self, cfg: RunConfig) -> dict:
        """What building the config's data and model in a child process measured (kept by what it
        depends on; the child is the spare check when one is ready)."""
        return self.prechecks.measure(cfg, self.spares.check_process)

    def check(self, cfg: RunConfig, folder: str | Path | None = None) -> tuple[list[str], dict]:
        """Refuse a run this machine cannot start, before anything is written or spawned: the
        device, the data paths, factories that name the standard library, the one fit rule
        (workbench.machine.fit), then the machine's limits (cores, memory, the batch, the disk) with
        the config's data and model built once in a child process. Returns notes to show the user
        and what the child measured."""
        cfg = require_config(cfg)
        device = resolve_device(cfg.run.device)
        check_data_paths(cfg)
        check_resume_from(cfg)
        check_saves_are_shared(cfg)
        for name, spec, _ in named_code(cfg):
            check_spec(spec, name)
        reason = cannot_run(cfg, device)  # the one rule the planners and widgets ask too
        if reason:
            raise ConfigError(reason)
        need = self.precheck(cfg)
        folder = Path(folder) if folder is not None else runs_root(cfg)
        return check_limits(cfg, device.type, folder, need), need

    def plan(
        self,
        cfg: RunConfig,
        run_dir: str | Path | None = None,
        root: str | Path | None = None,
        *,
        env: dict[str, str] | None = None,
        threads: ThreadChoice | None = None,
    ) -> LaunchPlan:
        """Every check, once, and the ranks' threads and wait policy chosen from what other programs
        use now (workbench.machine.threads), unless `threads` brings a choice made already (every
        run of a comparison's round shares one). `env` adds environment variables for the ranks.
        Nothing is written or started."""
        meter = ContentionMeter()  # the checks below run meanwhile, in this process's tree
        run_dir = usable_run_dir(run_dir) if run_dir is not None else None
        root = Path(root) if root is not None else None
        target = run_dir if run_dir is not None else root if root is not None else runs_root(cfg)
        notes, need = self.check(cfg, target)
        threads = threads or choose_threads(cfg, other_cores_now(meter))
        env = {**allocator_env(cfg.run.allocator), **threads.env(), **(env or {})}
        spare = self.spares.would_take(cfg, supervisor_env(env))
        return LaunchPlan(cfg, notes, need, threads, env, run_dir, root, spare.command if spare else None)

    def start(self, plan: LaunchPlan) -> RunHandle:
        """Claim the run folder and start the plan's run under a supervisor, or hand it to a spare
        that fits it. Returns at once; the handle's command is what ran."""
        cfg, env = plan.config, plan.env
        run_dir = create_run_dir(cfg, plan.root, path=plan.run_dir)  # atomic: a second start is refused
        folder = RunFolder(run_dir)
        try:
            Reserve(run_dir).hold()  # room for summary.json even if the run fills the disk
            log = open_log(folder.log_file)
        except OSError as e:
            raise ConfigError(disk_message(run_dir, e, "preparing the run folder")) from None
        ranks_env = supervisor_env(env)
        spare, cold_because = self.spares.take(cfg, ranks_env)  # from here the run counts as going
        try:
            with log:
                proc, command, how = self._hand_to(spare, run_dir, env) if spare else (None, None, {})
                if proc is None:
                    command = worker_command(cfg, run_dir)  # cold: built only now, on a free port
                    proc = self.lifelines.start_supervisor(
                        ["--run-dir", str(run_dir)], command, log, ranks_env
                    )
        except BaseException:
            self.spares.ended(cfg, env)
            raise
        handle = RunHandle(run_dir, cfg, proc, command, plan.notes, plan.threads, env, self, warm=bool(how))
        try:  # who to look for: a reader tells a dead run from a live one by these pids
            folder.write_launch(
                {
                    "t": round(time.time(), 4),
                    "command": command,
                    "supervisor_pid": proc.pid,
                    "supervisor_created": created_time(proc.pid),
                    "launcher_pid": os.getpid(),
                    "launcher_created": created_time(),
                    "notes": plan.notes,
                    "precheck": plan.precheck,
                    "threads": plan.threads.as_dict(),
                    **(how or {"cold_because": cold_because or "the spare exited as it was handed the run"}),
                }
            )
        except OSError as e:
            handle.stop("the run folder could not be written")
            raise ConfigError(disk_message(folder.launch_file, e, "writing")) from None
        return handle

    @staticmethod
    def _hand_to(spare: Spare, run_dir: Path, env: dict[str, str]) -> tuple:
        """(supervisor, command, launch record fields) when the spare took the run; Nones when it
        had gone meanwhile."""
        if spare.hand_over(run_dir, env):
            return spare.proc, spare.command, {"warm": spare.record()}
        return None, None, {}

    def start_run(
        self,
        cfg: RunConfig,
        run_dir: str | Path | None = None,
        root: str | Path | None = None,
        *,
        env: dict[str, str] | None = None,
        threads: ThreadChoice | None = None,
    ) -> RunHandle:
        """Plan and start a run (Launcher.plan, then Launcher.start); returns at once with its handle.
        The arguments are those of the module's `start_run`, which calls this on its launcher.
        """
        return self.start(self.plan(cfg, run_dir, root, env=env, threads=threads))

    def run(
        self,
        cfg: RunConfig,
        run_dir: str | Path | None = None,
        timeout_s: float | None = None,
        *,
        env: dict[str, str] | None = None,
        threads: ThreadChoice | None = None,
    ) -> dict:
        """Start a run, wait for it, and return its summary (status says how it ended). The arguments
        are those of the module's `run`, which calls this on its launcher.
        """
        handle = self.start_run(cfg, run_dir, env=env, threads=threads)
        try:
            handle.wait(timeout_s)
        except subprocess.TimeoutExpired:
            handle.stop(f"timed out after {timeout_s:g} s")
        except BaseException:
            handle.stop("interrupted (Ctrl-C)")
            raise
        return {"run_dir": str(handle.run_dir), "returncode": handle.returncode, **handle.summary()}


_OWN: list[Launcher] = []  # this process's launcher, made when first asked for
_OWN_LOCK = threading.Lock()


def launcher() -> Launcher:
    """This process's launcher (a kernel's, a CLI's): the one the panels and commands share."""
    with _OWN_LOCK:
        if not _OWN:
            _OWN.append(Launcher())
        return _OWN[0]


def use_launcher(new: Launcher) -> Launcher:
    """Make `new` this process's launcher; returns the one it replaces (tests start each fresh)."""
    old = launcher()
    with _OWN_LOCK:
        _OWN[0] = new
    return old


def check_launch(cfg: RunConfig, folder: str | Path | None = None) -> list[str]:
    """The pre-launch checks of this process's launcher (Launcher.check); returns the notes."""
    return launcher().check(cfg, folder)[0]


def start_run(
    cfg: RunConfig,
    run_dir: str | Path | None = None,
    root: str | Path | None = None,
    *,
    env: dict[str, str] | None = None,
    threads: ThreadChoice | None = None,
) -> RunHandle:
    """Plan and start a run with this process's launcher (Launcher.plan, Launcher.start).

    :param cfg: the run's config; anything but a RunConfig is a ConfigError.
    :param run_dir: the run folder, new or empty; None: a fresh folder under `root`.
    :param root: where a fresh run folder goes; None: $WORKBENCH_RUNS, else the config's run.runs_dir.
    :param env: environment variables added for the ranks, over the allocator's and the threads'
        settings; None: none added.
    :param threads: the ranks' threads and wait policy, chosen already (a comparison's round shares
        one); None: chosen now from what other programs use.
    """
    return launcher().start_run(cfg, run_dir, root, env=env, threads=threads)


def run(
    cfg: RunConfig,
    run_dir: str | Path | None = None,
    timeout_s: float | None = None,
    *,
    env: dict[str, str] | None = None,
    threads: ThreadChoice | None = None,
) -> dict:
    """Start a run with this process's launcher, wait for it, and return its summary.

    :param cfg: the run's config; anything but a RunConfig is a ConfigError.
    :param run_dir: the run folder, new or empty; None: a fresh folder in the run store
        ($WORKBENCH_RUNS, else the config's run.runs_dir).
    :param timeout_s: seconds to wait before the run is stopped as timed out; None: wait until it ends.
    :param env: environment variables added for the ranks, over the allocator's and the threads'
        settings; None: none added.
    :param threads: the ranks' threads and wait policy, chosen already (a comparison's round shares
        one); None: chosen now from what other programs use.
    """
    return launcher().run(cfg, run_dir, timeout_s, env=env, threads=threads)
