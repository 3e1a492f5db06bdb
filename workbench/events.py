"""Events are JSON lines on disk: each rank appends to its file in the run folder
(workbench.runfolder: rankR.jsonl), one record a line,
flushed per line, so a crashed or killed run keeps everything up to its end.

The reading side tails the files (the dashboard polls them from a thread), buffering a torn last
line until its newline arrives. Every record is checked against the types its readers rely on
(FIELDS) before any reader sees it: a line that is not JSON, or whose `t` is not a number, or whose
`step` is not an integer, is skipped and named ("rank0.jsonl line 12: 't' is not a number, got
'x'") in the tail's `problems`, and reading goes on, so one damaged line never hides a run.
"""

from __future__ import annotations

import errno
import json
import math
import os
import time
from pathlib import Path

from .config import shown
from .runfolder import RunFolder

# The kinds of record a rank writes (its `event` field), in the order a run writes them; every
# writer and reader names them by these (tests/test_architecture.py keeps literals out).
START, INIT, READY, STEP, RESUMED, DONE, ERROR = (
    "start",
    "init",
    "ready",
    "step",
    "resumed",
    "done",
    "error",
)
HEARTBEAT = "heartbeat"  # between any two of the above, while the rank lives
ENDS = (DONE, ERROR)  # a rank's last record: completed (or diverged), or failed or stopped

# The fields of a record that readers compute with, named once here as the kinds are. A summary or
# a table that carries the same figure under the same name (a summary's samples_per_s) uses the
# same constant, so a renamed field cannot leave a reader behind.
EVENT = "event"  # the kind of record: one of the kinds above
TIME, RANK, ATTEMPT = "t", "rank", "attempt"  # every record: wall time (s), rank, restart attempt
# The step a step record (or a heartbeat) is about. It is spelled as the kind STEP is, but it is
# another name: STEP says what kind of record it is, STEP_NUMBER which step it holds.
STEP_NUMBER = "step"
LOSS, SAMPLES_PER_S = "loss", "samples_per_s"
STEP_TIME_MS, DATA_WAIT_MS = "step_time_ms", "data_wait_ms"  # the whole step; waiting for its batch
TFLOPS, MFU = "tflops", "mfu"  # achieved TFLOP/s and its share of the device's peak
RSS_GIB = "rss_gib"  # the process's resident memory, any device (workbench.train.memory_readings)
# a GPU's caching allocator: held now, reserved now, the peak so far
MEM_ALLOCATED_GIB, MEM_RESERVED_GIB = "mem_allocated_gib", "mem_reserved_gib"
MEM_PEAK_GIB = "mem_peak_gib"
GRAD_SCALE, SKIPPED_STEPS = "grad_scale", "skipped_steps"  # fp16 only: the loss scale, skips so far
NONFINITE_LOSSES = "nonfinite_losses"  # how many losses so far were NaN or infinite
PROFILED = "profiled"  # flag: the step ran under the profiler (left out of the figures)
LAST = "last"  # flag: the time budget ended the steps here; evaluating and saving next
THREADS = "threads"  # a warm-up step's thread count while a busy machine's trial tries them
MFU_OVER_PEAK = "mfu_over_peak"  # flag: the step went faster than the peak allows (a wrong peak)
PID, CREATED_T, WORLD_SIZE = "pid", "created_t", "world_size"  # the start record: the process
NODE = "node"  # the start record, in a SLURM job: the rank's node, as srun names it
ADDRESSES = "addresses"  # the ready record, across machines: each rank's address toward rank 0
STATUS, MESSAGE = "status", "message"  # an end record: how the rank ended, in words
WHERE = "where"  # a heartbeat: the frame the rank's main thread is in ("forward (model.py:12)")
PART = "part"  # a heartbeat: the part of a step the rank is in, one of STEP_PARTS ('' between)
STEP_PARTS = ("data", "copy", "forward", "backward", "optimizer")  # in the order a step runs them

MAX_LINE = 3800  # stay under 4 KiB so an append is one write, never interleaved or split


def _clean(value):
    """JSON has no NaN/inf: write them as strings the reader turns back into floats."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class EventWriter:
    """Appends records for one rank. Every record gets the event name, wall time, rank and attempt.
    A record is one write(2) to a file opened for appending; a write the disk cannot take whole (a
    full disk) is cut back off the file, so no torn line is left, and the OSError is raised."""

    def __init__(self, run_dir: str | Path, rank: int = 0, attempt: int = 0):
        self.path = RunFolder(run_dir).events_file(rank)
        self.rank, self.attempt = rank, attempt
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size

    @property
    def closed(self) -> bool:
        return self._fd is None

    def write(self, event: str, **fields) -> None:
        record = {EVENT: event, TIME: round(time.time(), 4), RANK: self.rank, ATTEMPT: self.attempt}
        record.update({k: _clean(v) for k, v in fields.items()})
        line = json.dumps(record, separators=(",", ":"))
        if len(line) > MAX_LINE:
            line = self._shorten(record)
        data = (line + "\n").encode()
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        try:
            written = os.write(self._fd, data)
        except OSError:
            self._cut()
            raise
        if written < len(data):
            self._cut()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
        self._size += written

    def _cut(self) -> None:
        try:
            os.ftruncate(self._fd, self._size)
        except OSError:
            pass

    @staticmethod
    def _shorten(record: dict) -> str:
        """Cut the longest strings (a traceback, say) from the front, keeping their end."""
        while True:
            line = json.dumps(record, separators=(",", ":"))
            if len(line) <= MAX_LINE:
                return line
            key = max(
                (k for k, v in record.items() if isinstance(v, str)),
                key=lambda k: len(record[k]),
                default=None,
            )
            if key is None or len(record[key]) < 40:
                return json.dumps({k: record[k] for k in (EVENT, TIME, RANK, ATTEMPT)})
            excess = len(line) - MAX_LINE + 20
            record[key] = "..." + record[key][excess + 3 :]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**62


def _finite(v) -> bool:
    return _number(v) and math.isfinite(v) and abs(v) < 1e18


# The fields readers compute with, and what each must be; others are passed through unchecked.
FIELDS = {
    EVENT: (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    TIME: (_finite, "a number"),
    RANK: (_count, "an integer >= 0"),
    ATTEMPT: (_count, "an integer >= 0"),
    STEP_NUMBER: (_count, "an integer >= 0"),  # a heartbeat before the first step says 0
    LOSS: (_number, "a number"),
    SAMPLES_PER_S: (lambda v: _finite(v) and v >= 0, "a number >= 0"),
    STEP_TIME_MS: (lambda v: _finite(v) and v >= 0, "a number >= 0"),
    DATA_WAIT_MS: (lambda v: _finite(v) and v >= 0, "a number >= 0"),
    PID: (lambda v: _count(v) and v > 0, "a process id"),
    CREATED_T: (_finite, "a number"),
    WORLD_SIZE: (lambda v: _count(v) and v >= 1, "an integer >= 1"),
    NODE: (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    ADDRESSES: (lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v), "a list of strings"),
    STATUS: (lambda v: isinstance(v, str), "a string"),
    MESSAGE: (lambda v: isinstance(v, str), "a string"),
}


# The fields each kind of record must hold: its readers index them without asking.
REQUIRED = {STEP: (STEP_NUMBER,)}
# A step record's figures are numbers, charted as they come; these are its only other fields.
STEP_FLAGS = (PROFILED, LAST, MFU_OVER_PEAK)
# The step record's other figures the trainer writes (numbers, checked as every figure is).
STEP_FIGURES = (
    TFLOPS,
    MFU,
    RSS_GIB,
    MEM_ALLOCATED_GIB,
    MEM_RESERVED_GIB,
    MEM_PEAK_GIB,
    GRAD_SCALE,
    SKIPPED_STEPS,
    NONFINITE_LOSSES,
)
KEYS = (*FIELDS, *STEP_FIGURES, *STEP_FLAGS)  # every field named here


def check_record(rec) -> str | None:
    """What makes a record unusable, in a few words; None when it is fine."""
    if not isinstance(rec, dict):
        return f"not a JSON object, got {type(rec).__name__}"
    if EVENT not in rec:
        return f"no {EVENT!r} field"
    for key, (ok, allowed) in FIELDS.items():
        if key in rec and not ok(rec[key]):
            return f"{key!r} is not {allowed}, got {shown(rec[key], 40)}"
    missing = [k for k in REQUIRED.get(rec[EVENT], ()) if k not in rec]
    if missing:
        return f"a {rec[EVENT]!r} record without {missing[0]!r}"
    if rec[EVENT] == STEP:
        for key, v in rec.items():
            flag = key in STEP_FLAGS
            if key != EVENT and not (isinstance(v, bool) if flag else _number(v)):
                return f"{key!r} is not {'true or false' if flag else 'a number'}, got {shown(v, 40)}"
    return None


def _parse(line: str) -> tuple[dict | None, str | None]:
    """The record on a line, or None and why it cannot be used."""
    try:
        rec = json.loads(line)
    except ValueError as e:  # not JSON, or a number too long to read
        return None, f"not valid JSON ({str(e)[:60]})"
    if isinstance(rec, dict):
        for k, v in rec.items():
            if isinstance(v, str) and v in ("nan", "inf", "-inf"):
                rec[k] = float(v)
    problem = check_record(rec)
    return (None, problem) if problem else (rec, None)


class FileTail:
    """Reads the complete lines added to one file since the last poll."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._offset = 0
        self._partial = b""
        self._line = 0
        self.problems: list[str] = []  # the lines skipped, each named with why

    def poll(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")  # the last piece has no newline yet
        out = []
        for raw in lines:
            self._line += 1
            if not raw.strip():
                continue
            rec, problem = _parse(raw.decode("utf-8", errors="replace"))
            if rec is not None:
                out.append(rec)
            else:
                self.problems.append(
                    f"{self.path.parent.name}: {self.path.name} line {self._line}: {problem}; skipped"
                )
        return out


class RunTail:
    """Tails every rank file of a run directory, picking up ranks as their files appear."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self._folder = RunFolder(run_dir)
        self._tails: dict[Path, FileTail] = {}

    def poll(self) -> list[dict]:
        for path in self._folder.events_files():
            self._tails.setdefault(path, FileTail(path))
        out: list[dict] = []
        for tail in self._tails.values():
            out.extend(tail.poll())
        out.sort(key=lambda r: r.get(TIME, 0))
        return out

    @property
    def problems(self) -> list[str]:
        """Every line skipped so far, in every rank's file, with why."""
        return [p for tail in self._tails.values() for p in tail.problems]


def read_events(run_dir: str | Path) -> list[dict]:
    """Every complete, usable record of a run, all ranks, in time order (damaged lines skipped:
    `read_events_checked` names them)."""
    return RunTail(run_dir).poll()


def read_events_checked(run_dir: str | Path) -> tuple[list[dict], list[str]]:
    """The usable records, and a line for each one skipped."""
    tail = RunTail(run_dir)
    return tail.poll(), tail.problems


# Errors a rank raises because another rank died or hung, not because of its own code.
KNOCK_ON = (
    "connection closed",
    "connection reset",
    "broken pipe",
    "timed out",
    "timeout",
    "distbackenderror",
    "communicator was aborted",
    "socket",
    "recv",
    "peer",
)


def is_knock_on(record: dict) -> bool:
    """Whether an error record (its type and message) is a reaction to another rank's end."""
    text = f"{record.get('error_type', '')} {record.get(MESSAGE, '')}".lower()
    return any(k in text for k in KNOCK_ON)
