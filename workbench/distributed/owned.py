"""Supervisors owned by this process, for runs or for spares (workbench.distributed.warm), each on a
lifeline. A Launcher (workbench.distributed.launcher) holds one Lifelines.

    lifelines = Lifelines()
    proc = lifelines.start_supervisor(["--run-dir", str(run_dir)], command, log, env)
    lifelines.send(proc.pid, f"{run_dir}\\n")   # a spare learns its run this way
    lifelines.release(proc.pid)                 # the run ended (or the spare is not wanted)

The lifeline is a pipe whose write end only this process holds: its end-of-file tells the
supervisor that the kernel (or CLI) died, so the supervisor sweeps everything it started.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

SUPERVISOR = ["-m", "workbench.distributed.supervisor"]


class Lifelines:
    """The write ends of the lifelines of the supervisors this launcher started, by pid."""

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}
        self._lock = threading.Lock()

    def start_supervisor(
        self, mode: list[str], command: list[str], log, env: dict[str, str]
    ) -> subprocess.Popen:
        """`python -m workbench.distributed.supervisor MODE --parent-fd FD -- COMMAND`, in its own
        session (Ctrl-C in a terminal reaches this process only), its output in `log`."""
        read_fd, write_fd = os.pipe()
        try:
            proc = subprocess.Popen(
                [sys.executable, *SUPERVISOR, *mode, "--parent-fd", str(read_fd), "--", *command],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                stdin=subprocess.DEVNULL,
                pass_fds=(read_fd,),
                start_new_session=True,
            )
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        with self._lock:
            self._fds[proc.pid] = write_fd
        return proc

    def send(self, pid: int, text: str) -> bool:
        """Write `text` down a live lifeline; False when that supervisor has already gone."""
        with self._lock:
            fd = self._fds.get(pid)
        if fd is None:
            return False
        try:
            os.write(fd, text.encode())
            return True
        except BrokenPipeError:
            return False

    def release(self, pid: int) -> None:
        """Close the lifeline: the supervisor ends what it started (a run that has ended already
        is not affected)."""
        with self._lock:
            fd = self._fds.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def held(self) -> list[int]:
        with self._lock:
            return list(self._fds)
