"""A tracked run: a user's own training loop writing the run folder and events the workbench's
ranks write, so the dashboard, `workbench runs`, `compare`, the diagnosis of a dead rank and the
memory view read it unchanged.

    run = workbench.track(config=vars(args))
    for x, y in loader:
        with run.step(samples=len(x)) as step:
            loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()
            step.loss = loss

Per step it costs two clock reads, a device sync when the process uses a GPU (so the step time is
the device's, not the launch's), and a record put on a queue that a thread writes as one short JSON
line (and sends to the sinks) every FLUSH_S: a kill loses at most that much. Memory is read on a
timer, as a rank reads it. The gap between two steps is the step's data wait (the loader, and
anything else the loop does between steps). FLOPs are not counted (the tracker does not know the model), so a
tracked run has no MFU.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections import deque
from pathlib import Path

import torch

from ..config import ConfigError
from ..disk import write_atomic
from ..events import (
    is_knock_on,
    DATA_WAIT_MS,
    DONE,
    ERROR,
    INIT,
    LAST,
    LOSS,
    NODE,
    NONFINITE_LOSSES,
    READY,
    SAMPLES_PER_S,
    START,
    STEP,
    STEP_NUMBER,
    STEP_TIME_MS,
    WORLD_SIZE,
)
from ..machine.contention import ContentionMeter
from ..machine.threads import wait_advice, wait_policy
from ..measure.steps import step_stats
from ..runfolder import FINAL_KEY, RunFolder, error_type_of
from ..train import memory_readings
from ..train.budget import TimeBudget
from ..train.heartbeat import Heartbeat, LockedWriter
from ..train.rank import RankEnv

BUDGET_ENV = "WORKBENCH_TIME_BUDGET_S"  # seconds of steps, set by `workbench ab --cmd`: then it ends
EXIT_STOPPED = 143  # as a workbench rank stopped by SIGTERM


class BudgetSpent(SystemExit):
    """Ends a tracked script whose time budget ($WORKBENCH_TIME_BUDGET_S) is spent, exit code 0,
    after its end is recorded: the loop need not check `run.should_stop` itself."""


def _device() -> torch.device:
    """The device the loop computes on, as far as the tracker can tell: a GPU once CUDA is in use."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _number(value) -> float | None:
    """A loss as a float: a tensor's value (after the step's sync), a number, or None."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        if value.numel() == 1:
            return value.item()
        return float(value.detach().float().mean()) if value.numel() else None
    return float(value)


class Step:
    """One step of the loop; set `loss` (a tensor or a number) inside the `with` block.

    :param number: the step's number in this process, from 1.
    :param samples: the samples the step handles, for its samples/s; None: no rate is recorded.
    :param loss: the step's loss, a tensor or a number; None: none recorded unless set in the block.
    """

    __slots__ = ("loss", "samples", "number")

    def __init__(self, number: int, samples: int | None, loss=None):
        self.number, self.samples, self.loss = number, samples, loss


class _StepTimer:
    """The `with run.step(...)` block: times it, after the device's queued work is done."""

    __slots__ = ("run", "step", "t0", "wait")

    def __init__(self, run: "Run", step: Step):
        self.run, self.step = run, step

    def __enter__(self) -> Step:
        self.t0 = time.perf_counter()
        self.wait = self.run._begin(self.t0)
        return self.step

    def __exit__(self, kind, value, tb) -> bool:
        if kind is not None:
            return False  # an exception: the run's end records it (workbench.tracking.ending)
        _sync(self.run.device)
        t1 = time.perf_counter()
        self.run._record(self.step, t1 - self.t0, self.wait, t1)
        return False


FLUSH_S = 0.1  # how often the step records are written: a kill loses at most this much of them


class _Flusher(threading.Thread):
    """Writes the step records (and sends them to the sinks) off the loop's thread, every FLUSH_S:
    a step only appends its record to a queue, so logging never waits on the disk or a store."""

    def __init__(self, run: "Run"):
        super().__init__(daemon=True, name="workbench-track-writer")
        self.owner, self.queue = run, deque()
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(FLUSH_S):
            self.flush()

    def flush(self) -> None:
        while self.queue:
            number, rec = self.queue.popleft()
            try:
                self.owner._events.write(STEP, **rec)
            except (OSError, ValueError):
                pass  # a full disk: the end record says what it can
            if self.owner.sinks:
                self.owner._tell_sinks("step", number, rec)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self.flush()


class Run:
    """One process of a tracked run (one rank under torchrun), made by `workbench.track`.

    :param path: the run folder, already made and claimed (`workbench.track` does both).
    :param env: this process's rank, world size and attempt, as read from the environment.
    :param record: the script's record (script.json); a batch size of None is filled in from the first
        step's samples.
    :param budget_s: seconds of steps, counted from the first step, after which the run ends; 0: no budget.
    :param exit_at_budget: once the budget is spent, record the end and exit with code 0; False: only
        `should_stop` turns True.
    :param sinks: outlets that get the record, every step's figures and the summary; kept on rank 0 only.
    """

    def __init__(
        self,
        path: Path,
        env: RankEnv,
        record: dict,
        budget_s: float = 0.0,
        exit_at_budget: bool = True,
        sinks=(),
    ):
        self.dir, self.env = path, env
        self.rank, self.world_size = env.rank, env.world_size
        self.record = record
        self.sinks = list(sinks) if env.rank == 0 else []  # one rank speaks for the run
        self.exit_at_budget = exit_at_budget
        self.device = torch.device("cpu")
        self.ended: str | None = None
        self._folder = RunFolder(path)
        self._t_made, self._made = time.time(), time.perf_counter()
        self._events = LockedWriter(path, env.rank, env.attempt)
        self._times: list[float] = []
        self._waits: list[float] = []
        self._samples: list[int] = []
        self._losses: list[float] = []
        self._nonfinite = 0
        self._last_end: float | None = None
        self._first_step_t: float | None = None
        self._next_mem = 0.0
        self._budget_s = budget_s
        self._budget: TimeBudget | None = None
        self._last = False
        self._events.write(
            START,
            pid=os.getpid(),
            created_t=_created(),
            host=socket.gethostname(),
            world_size=env.world_size,
            local_rank=env.local_rank,
            tracked=True,
            **({NODE: os.environ["SLURMD_NODENAME"]} if "SLURMD_NODENAME" in os.environ else {}),
        )
        self._events.write(
            INIT,
            torch=torch.__version__,
            threads=torch.get_num_threads(),
            wait_policy=wait_policy(),
            threads_why="the script's own choice (the tracker chooses nothing)",
        )
        self._meter = ContentionMeter(_tree_pid()) if env.rank == 0 else None
        self._heartbeat = Heartbeat(self._events)
        self._heartbeat.start()
        self._flusher = _Flusher(self)
        self._flusher.start()
        self._tell_sinks("start", record)

    def __repr__(self) -> str:
        return f"<workbench run {str(self.dir)!r} rank {self.rank}, {len(self._times)} steps>"

    def count_as_own(self, *pids: int) -> None:
        """Count these process trees' CPU as the run's own work, not as other programs' load (the
        servers a load run drives)."""
        if self._meter is not None:
            self._meter = ContentionMeter(_tree_pid(), also=tuple(pids))

    # --- the loop's side --------------------------------------------------------------------
    def step(self, samples: int | None = None, loss=None) -> _StepTimer:
        """Time one step: `with run.step(samples=len(x)) as step: ...; step.loss = loss`.

        :param samples: the samples the step handles, for its samples/s; None: no rate is recorded.
        :param loss: the step's loss when known before the block; None: set `step.loss` inside it, or none.
        """
        return _StepTimer(self, Step(len(self._times) + 1, samples, loss))

    def log_step(self, loss=None, samples: int | None = None, **figures) -> None:
        """Record a step that just ended, timed from the end of the one before (the first from
        `track()` or the last `log_step`): for loops that hand the step to a library.

        :param loss: the step's loss, a tensor or a number; None: none recorded.
        :param samples: the samples the step handled, for its samples/s; None: no rate is recorded.
        """
        if self._last_end is None:
            self._begin(self._made)
            self._last_end = self._made
        _sync(self.device)
        t1 = time.perf_counter()
        step = Step(len(self._times) + 1, samples, loss)
        self._record(step, t1 - self._last_end, None, t1, figures)

    def begin_step(self) -> tuple[float, float | None]:
        """For a library's callbacks: a step starts now. Returns its start (perf_counter) and the
        wait since the step before (None for the first); `add_step` records it."""
        now = time.perf_counter()
        return now, self._begin(now)

    def add_step(
        self, seconds: float, *, samples: int | None = None, loss=None, wait_s: float | None = None, **figures
    ) -> None:
        """For a library's callbacks: record a step the caller timed (after a device sync).

        :param seconds: the step's time in seconds, as the caller measured it (from `begin_step`'s start).
        :param samples: the samples the step handled, for its samples/s; None: no rate is recorded.
        :param loss: the step's loss, a tensor or a number; None: none recorded.
        :param wait_s: seconds spent between the previous step and this one (`begin_step` returns it);
            None: no data wait is recorded.
        """
        self._record(Step(len(self._times) + 1, samples, loss), seconds, wait_s, time.perf_counter(), figures)

    def sync(self) -> None:
        """Wait for the device's queued work, as a timed step's end does."""
        _sync(self.device)

    @property
    def should_stop(self) -> bool:
        """Whether the time budget ($WORKBENCH_TIME_BUDGET_S) is spent: a loop that checks it ends
        on its own; one that does not is ended after its next step."""
        return self._last

    @property
    def steps(self) -> int:
        """How many steps this process has recorded so far."""
        return len(self._times)

    def _begin(self, now: float) -> float | None:
        """A step starts at `now`: the first one says the run is ready; returns the data wait."""
        if self._first_step_t is None:
            self.device = _device()
            self._first_step_t = time.time()
            self._events.write(
                READY,
                device=str(self.device),
                **memory_readings.sample(self.device),
                setup_s=round(self._first_step_t - self._t_made, 3),
            )
            if self._budget_s:
                self._budget = TimeBudget(self._budget_s, self.world_size, self.device)
            if self._meter is not None:
                self._meter.restart()
            return None
        return now - self._last_end if self._last_end is not None else None

    def _record(
        self, step: Step, dt: float, wait: float | None, t_end: float, figures: dict | None = None
    ) -> None:
        loss = _number(step.loss)
        rec = {STEP_NUMBER: step.number, STEP_TIME_MS: round(dt * 1e3, 4)}
        if loss is not None:
            rec[LOSS] = loss
            self._losses.append(loss)
            if loss != loss or loss in (float("inf"), float("-inf")):
                self._nonfinite += 1
                rec[NONFINITE_LOSSES] = self._nonfinite
        if wait is not None:
            rec[DATA_WAIT_MS] = round(wait * 1e3, 4)
        if step.samples:
            rec[SAMPLES_PER_S] = round(step.samples / dt, 2) if dt > 0 else 0.0
            self._samples.append(int(step.samples))
            if "batch_size" not in self.record or self.record["batch_size"] is None:
                self._note_batch(int(step.samples))
        if t_end >= self._next_mem:
            self._next_mem = t_end + 0.5
            rec.update(memory_readings.sample(self.device))
        rec.update({k: float(v) for k, v in (figures or {}).items() if v is not None})
        if self._budget is not None and self._budget.spent():
            rec[LAST] = True
            self._last = True
        self._flusher.queue.append((step.number, rec))
        self._times.append(dt)
        self._waits.append(wait or 0.0)
        self._last_end = time.perf_counter()
        if self._last and self.exit_at_budget:
            self.finish()
            raise BudgetSpent(0)

    def _tell_sinks(self, what: str, *args) -> None:
        """Send to every sink. One whose library is missing is refused at the start in one line;
        one that fails later (its store gone, a full disk) says so once and is dropped, and the
        loop and its run folder go on."""
        for sink in list(self.sinks):
            try:
                getattr(sink, what)(*args)
            except ConfigError:
                raise
            except Exception as e:  # noqa: BLE001 - any library's error: the run matters more
                print(
                    f"workbench: {type(sink).__name__} failed and is dropped: {type(e).__name__}: {e}",
                    file=sys.stderr,
                )
                self.sinks.remove(sink)

    def _note_batch(self, samples: int) -> None:
        """The batch size, from the first step's samples, into the script's record (rank 0)."""
        self.record["batch_size"] = samples
        if self.rank == 0:
            try:
                self._folder.write_script(self.record)
            except OSError:
                pass  # a listing shows no batch size; the run goes on

    # --- the end ----------------------------------------------------------------------------
    def figures(self) -> dict:
        """The summary's figures so far, as the trainer's summary names them."""
        out = {
            "steps": len(self._times),
            WORLD_SIZE: self.world_size,
            "device": str(self.device),
            "threads": torch.get_num_threads(),
            "wait_policy": wait_policy(),
            NONFINITE_LOSSES: self._nonfinite,
            "wall_s": round(time.time() - self._t_made, 3),
        }
        if self.record.get("precision"):
            out["precision"] = self.record["precision"]
        if self._first_step_t is not None:
            out["time_to_first_step_s"] = round(self._first_step_t - self._t_made, 3)
        if self._losses:
            out["final_loss"] = self._losses[-1]
        if self._times:
            batch = sorted(self._samples)[len(self._samples) // 2] if self._samples else 0
            stats = step_stats(self._times, self._waits, batch, self.world_size)
            if not batch:
                stats.pop(SAMPLES_PER_S)
            out.update(stats)
        if self._meter is not None and self._times:
            out["contention"] = self._meter.read()
            advice = wait_advice(torch.get_num_threads(), out["contention"]["other_cpu_cores"])
            if advice:
                out["threads_note"] = advice
        mem = memory_readings.sample(self.device)
        out.update({k: v for k, v in mem.items() if k != "mem_allocated_gib"})
        return out

    def finish(
        self,
        status: str = "completed",
        error: BaseException | None = None,
        message: str = "",
        returncode: int | None = 0,
    ) -> None:
        """Record how the run ended (once): `done` with the figures, or `error` with the
        exception's traceback; rank 0 writes summary.json. Called by the loop's end, the `with`
        block, the exception hook, a stop signal or the interpreter's exit.

        :param status: "completed", "diverged", "failed" or "stopped"; a completed run whose last loss is
            not a number is recorded as diverged.
        :param error: the exception that failed the run, its traceback recorded; None: none.
        :param message: the end's reason in words, in the summary; "": none ("stopped" for a stop).
        :param returncode: the process's exit code, kept in the summary of a one-process run; None: unknown.
        """
        if self.ended is not None:
            return
        self.ended = status
        self._heartbeat.stop()
        self._flusher.stop()  # every step record written before the end record
        summary = self.figures()
        if status == "completed":
            summary["ended_by"] = "steps"
        if status == "completed" and self._last:  # the budget ended them, tracker or loop stopping
            summary.update(
                ended_by="time_budget",
                ended_note=f"ended by its time budget "
                f"({self._budget_s:g} s, ${BUDGET_ENV}) after {len(self._times)} steps",
            )
        own_failure = False  # failed by its own error, not in reaction to another rank's end
        try:
            if status in ("completed", "diverged"):
                if self._losses and summary.get("final_loss") != summary.get("final_loss"):
                    status = self.ended = "diverged"
                    message = f"the loss ended {summary['final_loss']}"
                self._events.write(DONE, status=status, **summary)
            else:
                record, info = self._failure(status, error, message)
                summary.update(info)
                own_failure = status == "failed" and not is_knock_on(record)
                self._events.write(ERROR, status=status, **record)
        except (OSError, ValueError):
            pass  # a full disk: the summary below may still fit
        summary.update(
            status=status, **({"message": message} if message and "message" not in summary else {})
        )
        if self.world_size == 1:  # several ranks: a reader names the rank at fault once all end
            summary[FINAL_KEY] = returncode  # (workbench.distributed.faults.settle_tracked)
        self._tell_sinks("finish", {**summary, "tags": self.record.get("tags") or {}})
        # rank 0 writes the summary, and so does a rank that failed by its own error, as it ends:
        # torchrun then stops rank 0, whose knock-on error or stop does not replace that rank's
        if (self.rank == 0 and not self._another_rank_failed()) or (self.world_size > 1 and own_failure):
            try:
                self._folder.write_summary(summary)
            except OSError:
                pass
        self._events.close()

    def _another_rank_failed(self) -> bool:
        """Whether another rank has written the summary of its own failure."""
        try:
            written = self._folder.summary() or {}
        except (ConfigError, OSError, ValueError):
            return False
        return written.get("cause") in ("raised", "exited") and written.get("failed_rank") not in (
            None,
            self.rank,
        )

    def _failure(self, status: str, error: BaseException | None, message: str) -> tuple[dict, dict]:
        """The error record's fields (the exception's own message, as a rank writes it) and the
        summary's (one line naming the rank and the step, as a diagnosis words it)."""
        step = len(self._times) + 1 if self._first_step_t is not None else None
        where = f"at step {step}" if step else "before its first step"
        phase = f"step {step}" if step else "setting up"
        if error is not None and status == "failed":
            tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
            try:
                write_atomic(self._folder.traceback_file(self.rank), tb)
            except OSError:
                pass
            kind = type(error).__name__
            record = {"error_type": kind, "message": str(error), "phase": phase, "traceback": tb}
            return record, {
                "cause": "raised",
                "error_type": kind,
                "failed_rank": self.rank,
                "phase": phase,
                "traceback": tb,
                "message": f"rank {self.rank} raised {kind} {where}: {error}",
            }
        if status == "failed":  # sys.exit(code) with a code that is not 0
            record = {"error_type": error_type_of("exited"), "message": message, "phase": phase}
            return record, {
                "cause": "exited",
                "error_type": record["error_type"],
                "failed_rank": self.rank,
                "phase": phase,
                "message": f"rank {self.rank} {message} {where}",
            }
        message = message or "stopped"
        record = {"error_type": error_type_of("stopped"), "message": message, "phase": phase}
        return record, {
            "cause": "stopped",
            "error_type": record["error_type"],
            "failed_rank": self.rank,
            "phase": phase,
            "message": f"rank {self.rank} {message} {where}",
        }

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, kind, value, tb) -> bool:
        self.end(value)
        return False

    def end(self, error: BaseException | None = None) -> None:
        """Record the end from what ended the run (None: it ran to its end).

        :param error: what ended it: None or the budget's exit (completed), Ctrl-C (stopped), a
            SystemExit (completed with code 0 or None, else failed) or any other exception (failed).
        """
        if error is None or isinstance(error, BudgetSpent):
            self.finish()
        elif isinstance(error, KeyboardInterrupt):
            self.finish("stopped", message="stopped by Ctrl-C (SIGINT)", returncode=-signal.SIGINT)
        elif isinstance(error, SystemExit):
            code = error.code
            if code in (None, 0):
                self.finish()
            else:
                self.finish(
                    "failed",
                    message=f"exited with code {code}",
                    returncode=code if isinstance(code, int) else 1,
                )
        else:
            self.finish("failed", error=error, returncode=1)


def _created() -> float | None:
    from ..procs import created_time

    return created_time()


def _tree_pid() -> int:
    """The process tree the run is: what its launcher says (WORKBENCH_TREE_PID), the torchrun
    agent under torchrun (every rank is its child), else this process."""
    if os.environ.get("WORKBENCH_TREE_PID"):
        return int(os.environ["WORKBENCH_TREE_PID"])
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return os.getppid()
    return os.getpid()


def budget_from_env(environ=os.environ) -> float:
    """$WORKBENCH_TIME_BUDGET_S as seconds (0: none), or a one-line refusal."""
    raw = environ.get(BUDGET_ENV, "").strip()
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (value >= 0 and value < float("inf")):
        raise ConfigError(f"${BUDGET_ENV} must be a number of seconds >= 0, got {raw!r}")
    return value
