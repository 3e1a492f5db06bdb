"""Process ownership shared by the supervisor and the ranks (Linux prctl): a process that dies with
its parent, a subreaper that adopts orphaned descendants, how a rank leaves, and "is this recorded
process still the one running" (psutil, imported only by the readers that ask)."""

from __future__ import annotations

import ctypes
import os
import shlex
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(option, value, 0, 0, 0) == 0


def set_pdeathsig(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send `sig` to this process when its parent dies (Linux only)."""
    return _prctl(PR_SET_PDEATHSIG, int(sig))


def become_subreaper() -> bool:
    """Orphaned descendants re-parent to this process instead of init (Linux only)."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def leave(code: int) -> None:
    """End this process with `code`. One of several ranks leaves without running C++ static
    destructors: their teardown races with the other ranks' (seen as an occasional SIGABRT,
    "terminate called without an active exception", after the last step). Every file is closed by
    then. Copied into exported scripts."""
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def created_time(pid: int | None = None) -> float | None:
    """When process `pid` (default: this one) was created, as psutil reports it, or None."""
    import psutil

    try:
        return round(psutil.Process(pid).create_time(), 4)
    except psutil.Error:
        return None


def same_process(pid: int, created: float | None, tolerance_s: float = 1.0) -> bool:
    """True while process `pid` runs (not a zombie) and, when `created` is known, is the process
    created then: a pid the kernel reused for another program does not count."""
    import psutil

    try:
        p = psutil.Process(int(pid))
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        return created is None or abs(p.create_time() - float(created)) <= tolerance_s
    except (psutil.Error, ValueError, TypeError):
        return False


class OtherWork:
    """`n` processes that each spin on a core, started outside this process's tree and each in a
    session of its own, as other users' programs are: outside the tree, so the noise guard and the
    thread choice count them as other work (children of this process would count as its own); a
    session each, because the kernel's scheduler shares the cores between sessions before it shares
    them between threads (autogroup), and spinners in this process's session would compete with
    its threads one by one, as no other user's program does. For benchmarks and tests of a busy
    machine:

        with OtherWork(2):
            ...   # both cores held by other programs
    """

    def __init__(self, n: int = 2):
        self.n, self.procs = n, []

    def __enter__(self) -> "OtherWork":
        import subprocess

        import psutil

        # setsid execs in place here: a job of a shell without job control leads no process group.
        # Each spinner looks every few tens of ms whether this process still lives and ends when it
        # does not, so a benchmark killed by a signal it cannot catch leaves no spinner behind.
        code = f"import os\nwhile True:\n for _ in range(500000): pass\n os.kill({os.getpid()}, 0)"
        spin = f"setsid {shlex.quote(sys.executable)} -c {shlex.quote(code)}"
        spin += " </dev/null >/dev/null 2>&1 & echo $!"
        out = subprocess.run(
            ["sh", "-c", "; ".join([spin] * self.n)], capture_output=True, text=True, check=True
        )  # sh exits at once: its children go to init, not to us
        self.procs = [psutil.Process(int(pid)) for pid in out.stdout.split()]
        # sh echoes a pid before setsid has made its session and turned into the spinner: wait for
        # both, so what runs next meets the busy machine it asked for
        deadline = time.monotonic() + 30
        while not all(self._spinning(p) for p in self.procs):
            if time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError("the busy processes did not start within 30 s")
            time.sleep(0.01)
        return self

    @staticmethod
    def _spinning(p) -> bool:
        import psutil

        try:
            return os.getsid(p.pid) == p.pid and p.cmdline()[:1] == [sys.executable]
        except (psutil.Error, OSError):
            return False

    def alive(self) -> bool:
        return all(p.is_running() and p.status() != "zombie" for p in self.procs)

    def __exit__(self, *exc) -> None:
        import psutil

        for p in self.procs:
            try:
                p.kill()  # psutil checks it is still the process it started, not a reused pid
            except psutil.Error:
                pass
