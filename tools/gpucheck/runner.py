"""The check's spine, stdlib only: the record each part fills in as it goes, the watchdog that stops a
part at its time limit, and the loop that runs the parts in order and continues past one that fails.

    records = run_parts(parts, ctx, on_progress=write_so_far)

A part is a function `run(ctx, rec)` that writes into its PartRecord while it works (`rec.item(...)`,
`rec.figures[...]`), so a part that fails or runs out of time still reports what it finished.
Parts that start processes bound them with the launcher's own timeouts; the watchdog is the limit
for everything else, and the backstop for those.
"""

from __future__ import annotations

import math
import signal
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

OK, FAILED, TIMED_OUT, SKIPPED, HUNG, INTERRUPTED = (
    "ok",
    "failed",
    "timed out",
    "skipped",
    "hung",
    "interrupted",
)
STATUSES = (OK, FAILED, TIMED_OUT, SKIPPED, HUNG, INTERRUPTED)
HANG_GRACE_S = 30.0  # after its limit, how long a part may take to notice before it counts as hung
MIN_PART_S = 5.0  # a part is not started with less time than this left in the whole budget
WAKE = signal.SIGUSR1  # not SIGALRM: pytest-timeout and others own the interval timer


class PartTimeout(BaseException):
    """A part ran past its time limit. A BaseException, so that `except Exception` in the code a part
    calls cannot swallow it (the launcher's `run` stops its run and raises it on)."""


@dataclass
class PartRecord:
    name: str
    limit_s: float
    what: str = ""
    status: str = "pending"
    seconds: float = 0.0
    error: str = ""
    summary: str = ""  # one line for the table
    figures: dict = field(default_factory=dict)
    items: list = field(default_factory=list)

    def item(self, name: str, status: str, **fields) -> dict:
        """Record one thing the part did: 'ok', 'failed' or 'skipped' (with its `reason`), and figures."""
        entry = {"name": name, "status": status, **fields}
        self.items.append(entry)
        return entry

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Part:
    name: str
    limit_s: float  # math.inf: whatever is left of the budget when it starts
    what: str
    run: Callable[["Context", PartRecord], None]


@dataclass
class Context:
    """What every part gets: where the report goes, the device, the clock, and what earlier parts left."""

    out: Path
    deadline: float  # time.monotonic() by which the whole check must have ended
    device: Any = None  # the torch.device checked
    gpu: dict = field(default_factory=dict)  # name, capability, memory, spec of that device
    shared: dict = field(default_factory=dict)  # figures one part leaves for a later one
    log: Callable[[str], None] = print
    cleanup: Callable[[], None] = lambda: None  # between parts: free what a part left on the device
    part_deadline: float = math.inf

    def left(self) -> float:
        """Seconds left to the running part (its limit, or the whole budget if that ends first)."""
        return min(self.deadline, self.part_deadline) - time.monotonic()

    def each(self, rec: "PartRecord", checks) -> None:
        """Run a part's (name, check) pairs: one that raises is a failed item of that name and the
        next still runs, on a device freed of what the last one left."""
        for name, check in checks:
            try:
                check(self, rec)
            except Exception as e:  # noqa: BLE001 - the other checks still run
                rec.item(name, "failed", reason=f"{type(e).__name__}: {e}"[:400])
            self.cleanup()


_ARMED: list["Watchdog"] = []  # the watchdog whose limit has passed, waiting for the main thread


def _on_wake(signum, frame) -> None:
    if _ARMED and not _ARMED[0].raised:
        dog = _ARMED[0]
        dog.raised = True
        raise PartTimeout(f"ran past its {round(dog.limit_s, 1):g} s limit")


class Watchdog:
    """Stops the part running on the main thread at `limit_s`: a signal raises PartTimeout there at the
    next Python instruction (a CUDA call in flight finishes first). A part still running `grace_s` later
    is wedged in a call that ignores signals (a hung kernel): `on_hang` runs on the watchdog's thread."""

    def __init__(
        self, limit_s: float, on_hang: Callable[[], None] | None = None, grace_s: float = HANG_GRACE_S
    ):
        self.limit_s, self.on_hang, self.grace_s = limit_s, on_hang, grace_s
        self.fired = self.raised = False
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="gpucheck-watchdog")

    def __enter__(self) -> "Watchdog":
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("a part runs on the main thread: the watchdog interrupts that thread")
        signal.signal(WAKE, _on_wake)  # stays installed: a late signal is then ignored, not fatal
        self._thread.start()
        return self

    def _watch(self) -> None:
        if self._done.wait(self.limit_s):
            return
        with self._lock:
            if self._done.is_set():
                return
            self.fired = True
            _ARMED[:] = [self]
            signal.pthread_kill(threading.main_thread().ident, WAKE)
        if not self._done.wait(self.grace_s) and self.on_hang is not None:
            self.on_hang()

    def __exit__(self, *exc) -> None:
        self._done.set()  # first: even if the limit's signal lands in here, no hang is reported
        try:
            with self._lock:
                _ARMED.clear()
        finally:
            self._thread.join(1.0)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:400]


def run_parts(
    parts: list[Part],
    ctx: Context,
    on_progress: Callable[[list], None] | None = None,
    on_hang: Callable[[list, PartRecord], None] | None = None,
    grace_s: float = HANG_GRACE_S,
) -> list[PartRecord]:
    """Run every part in order, each under its limit (cut to what is left of the whole budget), and
    return their records. A part that raises or times out is recorded and the next one starts;
    `on_progress(records)` runs after each part (write the report so far)."""
    records = [
        PartRecord(p.name, p.limit_s if math.isfinite(p.limit_s) else 0.0, p.what) for p in parts
    ]  # an unbounded part's limit is what is left when it starts
    for part, rec in zip(parts, records):
        left = ctx.deadline - time.monotonic()
        if left < MIN_PART_S:
            rec.status, rec.limit_s = SKIPPED, 0.0
            rec.error = f"not started: {max(left, 0):.0f} s were left of the check's time budget"
            continue
        limit = min(part.limit_s, left)
        rec.limit_s = round(limit, 1)
        ctx.part_deadline = time.monotonic() + limit
        ctx.log(f"[{part.name}] {part.what} (limit {limit:.0f} s)")
        t0 = time.monotonic()
        hang = (lambda r=rec: on_hang(records, r)) if on_hang else None
        try:
            with Watchdog(limit, hang, grace_s):
                part.run(ctx, rec)
            failed = [i["name"] for i in rec.items if i.get("status") == FAILED]
            rec.status = FAILED if failed else OK
            if failed and not rec.error:
                rec.error = "failed: " + ", ".join(failed)
        except PartTimeout:
            rec.status, rec.error = TIMED_OUT, f"stopped at its {round(limit, 1):g} s limit"
        except KeyboardInterrupt:
            rec.status, rec.error = INTERRUPTED, "interrupted (Ctrl-C)"
            raise
        except Exception as e:  # noqa: BLE001 - a failing part is recorded, the next one runs
            rec.status, rec.error = FAILED, _first_line(e)
            rec.figures["traceback"] = traceback.format_exc()[-3000:]
        finally:
            rec.seconds = round(time.monotonic() - t0, 2)
            ctx.part_deadline = math.inf
            try:
                ctx.cleanup()
            except Exception:  # noqa: BLE001 - freeing memory must not end the check
                pass
            ctx.log(
                f"[{part.name}] {rec.status} in {rec.seconds:.1f} s" + (f": {rec.error}" if rec.error else "")
            )
            if on_progress is not None:
                on_progress(records)
    return records
