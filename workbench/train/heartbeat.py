"""Per-rank heartbeat: a daemon thread appends a `heartbeat` record every second with the last step
the rank finished, where its main thread is right now ("forward (model.py:12)") and, in the
workbench's loop, which part of a step it is in, so the supervisor can name a stalled rank, say
whether it is alive and stuck or frozen, and tell it from a rank that waits for it.

Rank 0's heartbeat also says, every few seconds, what other programs did to the machine
(`contention`, workbench.machine.contention), so a live chart can flag a busy machine.
Costs one short JSON line a second; the training loop never waits for it.
"""

from __future__ import annotations

import os
import sys
import threading

from collections.abc import Callable

from ..events import HEARTBEAT, PART, STEP, STEP_NUMBER, WHERE, EventWriter
from ..machine.contention import ContentionMeter

INTERVAL_S = 1.0
CONTENTION_EVERY = 5  # beats between two readings of the noise guard


class LockedWriter(EventWriter):
    """An EventWriter two threads can share; it remembers the last step written."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self.last_step = 0

    def write(self, event: str, **fields) -> None:
        with self._lock:
            if event == STEP:
                self.last_step = fields.get(STEP_NUMBER, self.last_step)
            if not self.closed:
                super().write(event, **fields)

    def close(self) -> None:
        with self._lock:
            super().close()


def where(thread_id: int) -> str:
    """The innermost frame of a thread outside the standard library and torch: the user's code or
    the workbench's loop, else the innermost frame at all."""
    frame = sys._current_frames().get(thread_id)
    first = None
    while frame is not None:
        code = frame.f_code
        text = f"{code.co_name} ({os.path.basename(code.co_filename)}:{frame.f_lineno})"
        first = first or text
        path = code.co_filename
        if "site-packages" not in path and not path.startswith(sys.base_prefix):
            return text
        frame = frame.f_back
    return first or "?"


class Heartbeat(threading.Thread):
    def __init__(
        self,
        writer: LockedWriter,
        interval_s: float = INTERVAL_S,
        contention: ContentionMeter | None = None,
        part: Callable[[], str] | None = None,  # the part of a step the loop is in, where known
    ):
        super().__init__(daemon=True, name="workbench-heartbeat")
        self.writer, self.interval_s, self.contention, self.part = writer, interval_s, contention, part
        self.main_id = threading.main_thread().ident
        self._stop_event = threading.Event()

    def run(self) -> None:
        beats = 0
        while not self._stop_event.wait(self.interval_s):
            beats += 1
            extra = {PART: self.part()} if self.part else {}
            if self.contention is not None and beats % CONTENTION_EVERY == 0:
                extra["contention"] = self.contention.read()
                self.contention.restart()
            try:
                self.writer.write(
                    HEARTBEAT, **{STEP_NUMBER: self.writer.last_step, WHERE: where(self.main_id)}, **extra
                )
            except (OSError, ValueError):
                return  # the file was closed under us: the rank is ending

    def stop(self) -> None:
        self._stop_event.set()
