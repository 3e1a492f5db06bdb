"""Process ownership shared by the supervisor and the ranks (Linux prctl): a process that dies with
its parent, a subreaper that adopts orphaned descendants, and "is this recorded process still the
one running" (psutil, imported only by the readers that ask)."""
from __future__ import annotations

import ctypes
import signal
import sys

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
