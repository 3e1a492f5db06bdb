"""Start a supervisor owned by this process, for a run or for a spare (workbench.distributed.warm).

    proc = start_supervisor(["--run-dir", str(run_dir)], command, log, env)
    send(proc.pid, f"{run_dir}\\n")   # a spare learns its run this way
    release(proc.pid)                 # the run ended (or the spare is not wanted): close the lifeline

The lifeline is a pipe whose write end only this process holds: its end-of-file tells the
supervisor that the kernel (or CLI) died, so the supervisor sweeps everything it started.
"""
from __future__ import annotations

import os
import subprocess
import sys

SUPERVISOR = ["-m", "workbench.distributed.supervisor"]
_LIFELINES: dict[int, int] = {}  # supervisor pid -> write end of its lifeline pipe


def start_supervisor(mode: list[str], command: list[str], log, env: dict[str, str]) -> subprocess.Popen:
    """`python -m workbench.distributed.supervisor MODE --parent-fd FD -- COMMAND`, in its own
    session (Ctrl-C in a terminal reaches this process only), its output in `log`."""
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen([sys.executable, *SUPERVISOR, *mode, "--parent-fd", str(read_fd),
                                 "--", *command], stdout=log, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, pass_fds=(read_fd,), start_new_session=True)
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    _LIFELINES[proc.pid] = write_fd
    return proc


def send(pid: int, text: str) -> bool:
    """Write `text` down a live lifeline; False when that supervisor has already gone."""
    fd = _LIFELINES.get(pid)
    if fd is None:
        return False
    try:
        os.write(fd, text.encode())
        return True
    except BrokenPipeError:
        return False


def release(pid: int) -> None:
    fd = _LIFELINES.pop(pid, None)
    if fd is not None:
        os.close(fd)
