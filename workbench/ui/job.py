"""BackgroundJob: a lab panel's work on a thread, so the kernel stays responsive. One job at a time
(pressing a button again while it runs says so), the error shown in the panel's status line, and
one contract for every panel:

    job.start(work)     # returns at once; False (and a note in the status) while a job runs
    job.join(timeout)   # block until done; an error stays in the panel and in job.error
    job.wait(timeout)   # block until done; return work()'s result, or raise its error
"""

from __future__ import annotations

import html
import threading
from typing import Any, Callable

import ipywidgets as widgets

from ..config import ConfigError

ERROR_COLOR = "#d62728"


def error_text(e: BaseException) -> str:
    """A refused setting says only why; anything else also names the exception."""
    return f"error: {e}" if isinstance(e, ConfigError) else f"error: {type(e).__name__}: {e}"


def show(status, text: str, error: bool = False) -> None:
    """Put a line in a status widget: HTML widgets get it escaped (and red for an error)."""
    if isinstance(status, widgets.HTML):
        style = f" style='color:{ERROR_COLOR}'" if error else ""
        status.value = f"<span{style}>{html.escape(text)}</span>"
    else:
        status.value = text


class BackgroundJob:
    def __init__(
        self,
        status,
        buttons=(),
        name: str = "workbench-job",
        on_end: Callable[["BackgroundJob"], None] | None = None,
    ):
        self.status, self.buttons, self.name, self.on_end = status, tuple(buttons), name, on_end
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def busy(self) -> bool:
        """True, with a note in the status, while a job runs (a panel asks before it resets)."""
        if self.running:
            show(self.status, "busy: wait for the current job to finish (or stop it)", error=True)
        return self.running

    def start(self, work: Callable[[], Any]) -> bool:
        """Run `work` on a thread; its return value becomes `result`, its exception `error`."""
        if self.busy():
            return False
        self.result, self.error = None, None
        for b in self.buttons:
            b.disabled = True
        self._thread = threading.Thread(target=self._run, args=(work,), daemon=True, name=self.name)
        self._thread.start()
        return True

    def _run(self, work: Callable[[], Any]) -> None:
        try:
            self.result = work()
        except BaseException as e:  # noqa: BLE001 - shown in the panel, raised by wait()
            self.error = e
            show(self.status, error_text(e), error=True)
        finally:
            for b in self.buttons:
                b.disabled = False
            if self.on_end is not None:
                self.on_end(self)

    def join(self, timeout: float | None = None) -> bool:
        """Block until the job is done (or `timeout`); True if it is done."""
        if self._thread is not None and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        return not self.running

    def wait(self, timeout: float | None = None):
        """The job's result once it is done; its error raised; TimeoutError if still running."""
        if not self.join(timeout):
            raise TimeoutError(f"{self.name} is still running after {timeout:g} s")
        if self.error is not None:
            raise self.error
        return self.result
