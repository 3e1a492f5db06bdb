"""The supervisor: a small process between the launcher and torchrun that owns every process of a run.

    python -m workbench.distributed.supervisor --run-dir RUN_DIR --parent-fd FD -- torchrun ...
    python -m workbench.distributed.supervisor --warm SPARE_DIR --parent-fd FD -- ... --warm SPARE_DIR
    (started by workbench.distributed.launch and workbench.distributed.warm, not by hand)

torchrun starts each rank in its own session, so signalling torchrun's process group misses the
ranks, and a killed torchrun leaves them training. The supervisor therefore
- becomes a child subreaper (prctl), so ranks orphaned by a dead torchrun re-parent to it;
- watches a pipe from the launching process: end-of-file means the kernel (or CLI) died;
- watches the ranks' events (workbench.distributed.watchdog): not every rank ready in time, or a stalled rank;
- on any of these, on SIGTERM (stop), or when torchrun exits, sweeps its whole process tree:
  SIGTERM to the ranks, then torchrun, SIGKILL to whatever is left after a short grace;
- writes the diagnosis of how the run ended into summary.json (workbench.distributed.faults).
It imports no torch, so it adds tens of milliseconds to a launch.

A spare (--warm) starts its warm worker or warm torchrun at once and waits, owning them all the
while, for the launcher to name the run: one line on the lifeline pipe. It then points its output
at RUN_DIR/launcher.log (the workers' output passes through it), writes SPARE_DIR/job.json for the
waiting ranks, and supervises the run like any other; torchrun's logs move into the run folder at
the end and the spare folder goes. A lifeline that closes before a job sweeps the spare.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from ..runfolder import RunFolder
from ..disk import disk_message, keep_writes_to_owner, write_json_atomic
from ..procs import become_subreaper, set_pdeathsig
from ..runstore import removed_folder
from ..train.spare_rank import JOB
from .faults import Diagnosis, finish_summary, last_step
from .watchdog import Watchdog

SPARE_LOG = "spare.log"  # a spare's output until it has a run

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


def _handle_signals(handler) -> None:
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, handler)


def _start(command: list[str], relay: bool = False) -> subprocess.Popen:
    """Start the run's command as our child; with `relay`, its output (and its children's) goes
    through us to whatever our stdout is then, so a spare's output can follow it into the run."""
    become_subreaper()
    env = dict(os.environ, WORKBENCH_TREE_PID=str(os.getpid()))  # the run's tree, for its noise guard
    out = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT) if relay else {}
    child = subprocess.Popen(
        command, preexec_fn=lambda: set_pdeathsig(signal.SIGTERM), env=env, stdin=subprocess.DEVNULL, **out
    )
    if relay:
        threading.Thread(target=_copy_out, args=(child.stdout.fileno(),), daemon=True).start()
    _log(f"pid {os.getpid()} started pid {child.pid}: {' '.join(command)}")
    return child


def _copy_out(fd: int) -> None:
    while chunk := os.read(fd, 65536):
        try:
            os.write(1, chunk)
        except OSError:  # a full disk: the run goes on, its events say what happened
            pass


def _parent_gone(parent_fd: int | None) -> bool:
    """The lifeline closed: the launching process exited."""
    if parent_fd is None:
        return False
    ready, _, _ = select.select([parent_fd], [], [], 0)
    if not ready:
        return False
    try:
        return os.read(parent_fd, 4096) == b""
    except OSError as e:
        return e.errno != errno.EAGAIN


class Supervisor:
    def __init__(self, run_dir: Path, command: list[str], parent_fd: int | None):
        self.run_dir, self.command, self.parent_fd = run_dir, command, parent_fd
        self.cfg = RunFolder(run_dir).config()
        self.watchdog = Watchdog(run_dir, self.cfg)
        self.stop: dict | None = None  # {cause, message}: the run was ended on purpose
        self.failure: Diagnosis | None = None
        self.torchrun_logs: Path | None = None  # a spare's torchrun logs, moved into the run at the end

    def _on_term(self, signum, frame) -> None:
        self.stop = self.stop or _stop_reason(self.run_dir, signum)

    def run(self) -> int:
        _handle_signals(self._on_term)
        return self.watch(_start(self.command))

    def watch(self, child: subprocess.Popen) -> int:
        """Supervise the started run until it ends; returns the exit code to leave with."""
        self.watchdog.tree_pid = child.pid
        returncode = None
        while returncode is None:
            _reap()
            returncode = _EXITED.get(child.pid)
            if returncode is not None:
                break
            if self.stop is None and _parent_gone(self.parent_fd):
                self.stop = {
                    "cause": "launcher_exited",
                    "message": f"the process that started this run (the kernel or CLI) exited, "
                    f"so every rank was stopped after step {last_step(self.run_dir)}",
                }
            if self.stop is None and not self.run_dir.is_dir():  # nothing left to write into
                self.stop = removed_folder(self.run_dir)
            if self.stop is None:
                self.failure = self.watchdog.check()
            if self.stop or self.failure:
                what = self.stop["message"] if self.stop else self.failure.message
                _log(f"ending the run: {what}")
                sweep(child.pid)
                returncode = _EXITED.get(child.pid, -signal.SIGKILL)
                break
            if self.parent_fd is not None:
                select.select([self.parent_fd], [], [], 0.2)
            else:
                time.sleep(0.2)
        if returncode != 0 and not (self.stop or self.failure):
            # a stopped rank, then torchrun gave up on it; or a node that no longer answers
            self.failure = self.watchdog.frozen() or self.watchdog.unreachable()
        left = sweep(child.pid, grace_s=0.5)  # ranks torchrun left behind, if any
        if left:
            _log(f"killed {left} process(es) left behind after the run ended")
        if self.torchrun_logs is not None and self.torchrun_logs.is_dir():
            try:  # where a cold run keeps them, so the diagnosis finds torchrun's error files
                shutil.move(str(self.torchrun_logs), str(RunFolder(self.run_dir).torchrun_logs))
            except OSError as e:
                _log(f"torchrun's logs stay in {self.torchrun_logs}: {e}")
        agent = child.pid if self.cfg.distributed.world_size > 1 else None
        try:
            summary = finish_summary(
                self.run_dir,
                self.cfg.distributed.world_size,
                returncode,
                stop=self.stop,
                failure=self.failure,
                agent_pid=agent,
            )
            _log(f"run ended: {summary.get('status')}: {summary.get('message', '')}".rstrip(": "))
        except OSError as e:  # even the reserve did not make room: say it where it can be seen
            _log(
                f"run ended, but its summary could not be written: "
                f"{disk_message(RunFolder(self.run_dir).summary_file, e, 'writing')}"
            )
        return returncode if returncode >= 0 else 128 - returncode


def _stop_reason(run_dir: Path, signum: int) -> dict:
    """Stop pressed in the workbench (it writes stop_reason.txt first), or a signal from elsewhere."""
    reason = RunFolder(run_dir).stop_reason()
    if reason is not None:
        return {"cause": "stopped", "message": reason}
    return {
        "cause": "supervisor_signalled",
        "message": f"the supervisor (pid {os.getpid()}) got {signal.Signals(signum).name} from "
        f"another program, not from the workbench's Stop, so every rank was stopped "
        f"after step {last_step(run_dir)}",
    }


def _wait_for_job(parent_fd: int, child: subprocess.Popen, signalled: list) -> dict | None:
    """The job the launcher sends on the lifeline (its run folder and the environment handed to
    the ranks), or None: the lifeline closed, we were signalled, or the warm worker died before it
    had a job."""
    line = b""
    while not signalled:
        _reap()
        if child.pid in _EXITED:
            _log(f"the warm worker exited ({_EXITED[child.pid]}) before it had a run")
            return None
        ready, _, _ = select.select([parent_fd], [], [], 0.2)
        if not ready:
            continue
        try:
            chunk = os.read(parent_fd, 4096)
        except InterruptedError:
            continue
        if not chunk:
            return None
        line += chunk
        if line.endswith(b"\n"):
            return json.loads(line)
    return None


def serve_spare(spare_dir: Path, command: list[str], parent_fd: int) -> int:
    """A spare: start the warm command now, supervise the run the launcher hands it later."""
    signalled: list[int] = []
    _handle_signals(lambda signum, frame: signalled.append(signum))
    child = _start(command, relay=True)
    job = _wait_for_job(parent_fd, child, signalled)
    if job is None:
        sweep(child.pid, grace_s=0.5)
        shutil.rmtree(spare_dir, ignore_errors=True)
        return 0
    run_dir = Path(job["run_dir"])
    before = (spare_dir / SPARE_LOG).read_bytes() if (spare_dir / SPARE_LOG).is_file() else b""
    _point_output_at(RunFolder(run_dir).log_file)
    os.write(1, before)  # what the spare said while it waited
    supervisor = Supervisor(run_dir, command, parent_fd)
    supervisor.torchrun_logs = RunFolder(spare_dir).torchrun_logs
    _handle_signals(supervisor._on_term)
    write_json_atomic(
        spare_dir / JOB,
        {"config": str(RunFolder(run_dir).config_file), "t": time.time(), "env": job.get("env", {})},
    )
    _log(f"spare {spare_dir.name} took the run {run_dir.name}")
    try:
        return supervisor.watch(child)
    finally:
        shutil.rmtree(spare_dir, ignore_errors=True)


def _point_output_at(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main(argv: list[str] | None = None) -> int:
    keep_writes_to_owner()  # torchrun's logs and everything the ranks write, whatever the umask
    parser = argparse.ArgumentParser(prog="python -m workbench.distributed.supervisor")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--run-dir")
    which.add_argument("--warm", metavar="SPARE_DIR", help="a spare: wait for the run on the lifeline")
    parser.add_argument("--parent-fd", type=int)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.warm:
        if args.parent_fd is None:
            parser.error("--warm needs --parent-fd: the run is named on the lifeline")
        return serve_spare(Path(args.warm), command, args.parent_fd)
    return Supervisor(Path(args.run_dir), command, args.parent_fd).run()


if __name__ == "__main__":
    sys.exit(main())
