"""The supervisor: a small process between the launcher and torchrun that owns every process of a run.

    python -m workbench.distributed.supervisor --run-dir RUN_DIR --parent-fd FD -- torchrun ...
    (started by workbench.distributed.launch, not by hand)

torchrun starts each rank in its own session, so signalling torchrun's process group misses the
ranks, and a killed torchrun leaves them training. The supervisor therefore
- becomes a child subreaper (prctl), so ranks orphaned by a dead torchrun re-parent to it;
- watches a pipe from the launching process: end-of-file means the kernel (or CLI) died;
- watches the ranks' events (workbench.distributed.watchdog): not every rank ready in time, or a stalled rank;
- on any of these, on SIGTERM (stop), or when torchrun exits, sweeps its whole process tree:
  SIGTERM to the ranks, then torchrun, SIGKILL to whatever is left after a short grace;
- writes the diagnosis of how the run ended into summary.json (workbench.distributed.faults).
It imports no torch, so it adds tens of milliseconds to a launch.
"""
from __future__ import annotations

import argparse
import errno
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from ..config import RunConfig
from ..disk import disk_message
from ..procs import become_subreaper, set_pdeathsig
from .faults import finish_summary, last_step
from .watchdog import Watchdog

GRACE_S = 2.0  # SIGTERM -> SIGKILL: every rank is gone well within 5 s of a stop


def _log(msg: str) -> None:
    try:
        print(f"[workbench.supervisor] {msg}", flush=True)
    except OSError:  # launcher.log is on a full disk: the summary still says how the run ended
        pass


def _descendants() -> list:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


_EXITED: dict[int, int] = {}  # pid -> exit code of every child reaped here


def _reap() -> None:
    """Collect exit statuses of our child and of orphans that re-parented to us (no zombies)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _EXITED[pid] = os.waitstatus_to_exitcode(status)


def _alive(proc) -> bool:
    """Running and not a zombie (a zombie has exited; only its parent's wait is missing)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def sweep(main_pid: int, grace_s: float = GRACE_S) -> int:
    """End every descendant: ranks first (so they record 'stopped'), then the rest, then SIGKILL."""
    procs = _descendants()
    ranks = [p for p in procs if p.pid != main_pid]
    main = [p for p in procs if p.pid == main_pid]
    for group in (ranks, main):
        for p in group:
            try:
                p.send_signal(signal.SIGTERM)
                p.send_signal(signal.SIGCONT)  # a stopped (SIGSTOP) process handles it only once continued
            except psutil.Error:
                pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in procs):
        _reap()
        time.sleep(0.05)
    left = _descendants()  # includes anything started meanwhile
    for p in left:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=2.0)
    _reap()
    return len(left)


class Supervisor:
    def __init__(self, run_dir: Path, command: list[str], parent_fd: int | None):
        self.run_dir, self.command, self.parent_fd = run_dir, command, parent_fd
        self.cfg = RunConfig.load(run_dir / "config.json")
        self.watchdog = Watchdog(run_dir, self.cfg)
        self.stop: dict | None = None  # {cause, message}: the run was ended on purpose
        self.failure: dict | None = None

    def _on_term(self, signum, frame) -> None:
        self.stop = self.stop or _stop_reason(self.run_dir, signum)

    def _parent_gone(self) -> bool:
        if self.parent_fd is None:
            return False
        ready, _, _ = select.select([self.parent_fd], [], [], 0)
        if not ready:
            return False
        try:
            return os.read(self.parent_fd, 64) == b""
        except OSError as e:
            return e.errno != errno.EAGAIN

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        signal.signal(signal.SIGHUP, self._on_term)
        become_subreaper()
        env = dict(os.environ, WORKBENCH_TREE_PID=str(os.getpid()))  # the run's tree, for its noise guard
        child = subprocess.Popen(self.command, preexec_fn=lambda: set_pdeathsig(signal.SIGTERM), env=env)
        _log(f"pid {os.getpid()} started pid {child.pid}: {' '.join(self.command)}")
        returncode = None
        while returncode is None:
            _reap()
            returncode = _EXITED.get(child.pid)
            if returncode is not None:
                break
            if self.stop is None and self._parent_gone():
                self.stop = {"cause": "launcher_exited",
                             "message": f"the process that started this run (the kernel or CLI) exited, "
                                        f"so every rank was stopped after step {last_step(self.run_dir)}"}
            if self.stop is None:
                self.failure = self.watchdog.check()
            if self.stop or self.failure:
                what = (self.stop or self.failure)["message"]
                _log(f"ending the run: {what}")
                sweep(child.pid)
                returncode = _EXITED.get(child.pid, -signal.SIGKILL)
                break
            if self.parent_fd is not None:
                select.select([self.parent_fd], [], [], 0.2)
            else:
                time.sleep(0.2)
        if returncode != 0 and not (self.stop or self.failure):
            self.failure = self.watchdog.frozen()  # a stopped rank, then torchrun gave up on it
        left = sweep(child.pid, grace_s=0.5)  # ranks torchrun left behind, if any
        if left:
            _log(f"killed {left} process(es) left behind after the run ended")
        agent = child.pid if self.cfg.distributed.world_size > 1 else None
        try:
            summary = finish_summary(self.run_dir, self.cfg, returncode, stop=self.stop,
                                     failure=self.failure, agent_pid=agent)
            _log(f"run ended: {summary.get('status')}: {summary.get('message', '')}".rstrip(": "))
        except OSError as e:  # even the reserve did not make room: say it where it can be seen
            _log(f"run ended, but its summary could not be written: "
                 f"{disk_message(self.run_dir / 'summary.json', e, 'writing')}")
        return returncode if returncode >= 0 else 128 - returncode


def _stop_reason(run_dir: Path, signum: int) -> dict:
    """Stop pressed in the workbench (it writes stop_reason.txt first), or a signal from elsewhere."""
    path = run_dir / "stop_reason.txt"
    if path.is_file():
        return {"cause": "stopped", "message": path.read_text().strip() or "stopped"}
    return {"cause": "supervisor_signalled",
            "message": f"the supervisor (pid {os.getpid()}) got {signal.Signals(signum).name} from "
                       f"another program, not from the workbench's Stop, so every rank was stopped "
                       f"after step {last_step(run_dir)}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workbench.distributed.supervisor")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--parent-fd", type=int)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return Supervisor(Path(args.run_dir), command, args.parent_fd).run()


if __name__ == "__main__":
    sys.exit(main())
