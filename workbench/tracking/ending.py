"""How a tracked script's end is recorded, whatever ends it: the loop's end or the interpreter's
exit (done), an exception nobody caught (error, with its traceback), Ctrl-C (stopped), SIGTERM or
SIGHUP from another program (stopped, exit 143, as a workbench rank), the time budget (done, exit 0).

A kill (SIGKILL) leaves no chance to write anything: the run's records end mid-way, and a reader
names it as it names the workbench's own ranks that vanished (workbench.runstore.read_summary).
Hooks are installed once per process and chain to what was there: the previous excepthook still
prints the traceback, and a signal handler the script or a library set is left alone.
"""

from __future__ import annotations

import atexit
import signal
import sys
import threading

from .tracked_run import EXIT_STOPPED, Run

_ACTIVE: list[Run] = []
_INSTALLED = False


def install(run: Run) -> None:
    _ACTIVE.append(run)
    global _INSTALLED
    if _INSTALLED:
        return
    _INSTALLED = True
    previous = sys.excepthook

    def hook(kind, value, tb):
        for r in _ACTIVE:
            r.end(value)
        previous(kind, value, tb)

    sys.excepthook = hook
    atexit.register(_at_exit)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is signal.SIG_DFL:
                signal.signal(sig, _stopped)


def _at_exit() -> None:
    for run in _ACTIVE:
        run.finish()


def _stopped(signum, frame) -> None:
    name = signal.Signals(signum).name
    for run in _ACTIVE:
        run.finish("stopped", message=f"stopped by signal {name}", returncode=EXIT_STOPPED)
    raise SystemExit(EXIT_STOPPED)
