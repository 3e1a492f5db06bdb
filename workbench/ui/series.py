"""What a live dashboard knows about one run, built from its event records: per-rank curves, the
total throughput (raw and as a rolling median), the run's status, AMP health, the data-wait
share, MFU, and what other programs did to the machine meanwhile.

Plain Python with no widgets, so it is cheap to feed from the tailer thread and easy to test.
Every curve is a `Curve` (workbench.ui.curve): appending is O(1) and drawing costs the same
however long the run grows.

    s = RunSeries(world_size=2); s.feed(records); s.ranks[0]["loss"].xy(), s.total["samples_per_s"]
"""

from __future__ import annotations

import math
from collections import defaultdict

from ..events import (
    ATTEMPT,
    DATA_WAIT_MS,
    ENDS,
    ERROR,
    EVENT,
    GRAD_SCALE,
    HEARTBEAT,
    LOSS,
    MEM_ALLOCATED_GIB,
    MEM_RESERVED_GIB,
    MESSAGE,
    MFU,
    MFU_OVER_PEAK,
    NONFINITE_LOSSES,
    RANK,
    READY,
    RSS_GIB,
    SAMPLES_PER_S,
    SKIPPED_STEPS,
    START,
    STATUS,
    STEP,
    STEP_NUMBER,
    STEP_TIME_MS,
    TIME,
    WORLD_SIZE,
)
from .curve import Curve, RollingMedian

CURVES = (LOSS, SAMPLES_PER_S, STEP_TIME_MS)
MEMORY_KEYS = (RSS_GIB, MEM_RESERVED_GIB, MEM_ALLOCATED_GIB)
AMP_KEYS = (GRAD_SCALE, SKIPPED_STEPS, NONFINITE_LOSSES)
SMOOTH_STEPS = 25  # the rolling median of samples/s drawn over the raw points


def _empty_rank() -> dict:
    return {
        **{k: Curve() for k in CURVES + MEMORY_KEYS},
        "samples_per_s_median": Curve(),
        "_median": RollingMedian(SMOOTH_STEPS),
    }


class RunSeries:
    """Accumulates step records per rank. `version` grows with every change, so a redraw loop can
    tell whether anything is new without comparing data."""

    def __init__(self, world_size: int = 1, total_steps: int | None = None):
        self.world_size = world_size
        self.total_steps = total_steps
        self.ranks: dict[int, dict] = {}
        self.total = {SAMPLES_PER_S: Curve(), "samples_per_s_median": Curve()}  # summed over ranks
        self._total_median = RollingMedian(SMOOTH_STEPS)
        self._pending: dict[int, dict[int, float]] = defaultdict(dict)
        self.status = "waiting"  # waiting, starting, running, completed, diverged, stopped, failed
        self.first_nonfinite: int | None = None  # the first step whose loss was NaN or infinite
        self.message = ""
        self.last_step = 0
        self.amp: dict[str, float] = {}
        self.mfu: float | None = None
        self.mfu_over_peak = False  # the latest step passed the peak: the peak is wrong
        self._mfu_median = RollingMedian(SMOOTH_STEPS)
        self.contention: dict | None = None  # the latest reading from rank 0's heartbeat
        self.wait_ms = self.step_ms = 0.0
        self.ended: dict[int, dict] = {}
        self._attempt: dict[int, int] = {}
        self.version = 0

    # --- feeding --------------------------------------------------------------------------
    def feed(self, records: list[dict]) -> None:
        for rec in records:
            self._feed_one(rec)
        if records:
            self.version += 1

    def _feed_one(self, rec: dict) -> None:
        event, rank = rec.get(EVENT), int(rec.get(RANK, 0))
        attempt = int(rec.get(ATTEMPT, 0))
        if attempt > self._attempt.get(rank, 0):  # torchrun restarted the ranks: show the new try
            self.ranks.pop(rank, None)
            self.ended.pop(rank, None)
        self._attempt[rank] = max(attempt, self._attempt.get(rank, 0))
        if event == START:
            self.world_size = max(self.world_size, int(rec.get(WORLD_SIZE, 1)))
            if self.status == "waiting":
                self.status = "starting"
        elif event == READY and self.status in ("waiting", "starting"):
            self.status = "running"
        elif event == STEP:
            self._feed_step(rank, rec)
        elif event == HEARTBEAT and rec.get("contention"):
            self.contention = rec["contention"]
        elif event in ENDS:
            self.ended[rank] = rec
            self._update_end()

    def _feed_step(self, rank: int, rec: dict) -> None:
        if self.status in ("waiting", "starting"):
            self.status = "running"
        step = int(rec.get(STEP_NUMBER, 0))
        r = self.ranks.setdefault(rank, _empty_rank())
        for k in CURVES + MEMORY_KEYS:
            r[k].append(step, rec.get(k))
        if rec.get(SAMPLES_PER_S) is not None:
            r["samples_per_s_median"].append(step, r["_median"].push(rec[SAMPLES_PER_S]))
        self.last_step = max(self.last_step, step)
        self.wait_ms += rec.get(DATA_WAIT_MS) or 0.0
        self.step_ms += rec.get(STEP_TIME_MS) or 0.0  # seconds of steps: what a time budget counts
        loss = rec.get(LOSS)
        if self.first_nonfinite is None and isinstance(loss, float) and not math.isfinite(loss):
            self.first_nonfinite = step  # the chart's loss line stops here: say why
            self.message = f"loss non-finite ({loss}) since step {step}"
        for k in AMP_KEYS:
            if k in rec:
                self.amp[k] = rec[k]
        if rec.get(MFU) is not None:  # the readout shows the recent median, not one noisy step
            self.mfu = self._mfu_median.push(rec[MFU])
        self.mfu_over_peak = bool(rec.get(MFU_OVER_PEAK))
        sps = rec.get(SAMPLES_PER_S)
        if sps is not None:  # total throughput: the sum over ranks once every rank did this step
            got = self._pending[step]
            got[rank] = sps
            if len(got) >= self.world_size:
                total = sum(got.values())
                self.total[SAMPLES_PER_S].append(step, total)
                self.total["samples_per_s_median"].append(step, self._total_median.push(total))
                del self._pending[step]

    def _update_end(self) -> None:
        errors = [r for r in self.ended.values() if r.get(EVENT) == ERROR]
        if errors:  # one failing rank ends the run; a stop reaches every rank
            first = min(errors, key=lambda r: r.get(TIME, 0))
            self.status = first.get(STATUS, "failed")
            self.message = first.get(MESSAGE, "")
            if self.status == "failed":
                self.message = (
                    f"rank {first.get(RANK, 0)}: {first.get('error_type', 'error')}: {self.message}"
                )
        elif len(self.ended) >= self.world_size:
            done = self.ended.get(0) or next(iter(self.ended.values()))
            self.status = done.get(STATUS, "completed")  # or diverged: the loss went NaN
            self.message = done[MESSAGE] if self.status == "diverged" else _done_message(done)

    def mark_exited(self, returncode: int | None) -> None:
        """The worker process is gone without a final record (killed hard): say so."""
        if not self.finished:
            self.status = "failed"
            code = "" if returncode is None else f" (code {returncode})"
            self.message = f"the worker exited{code} without a final record"
            self.version += 1

    # --- reading --------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self.status in ("completed", "diverged", "stopped", "failed")

    def data_wait_share(self) -> float | None:
        """The fraction of step time spent waiting for the next batch (all ranks, all steps)."""
        return self.wait_ms / self.step_ms if self.step_ms > 0 else None

    def latest(self, key: str, window: int = 10) -> float | None:
        """The median of the last `window` values (the total over ranks for samples/s)."""
        values: list = []
        if key == SAMPLES_PER_S and len(self.total[SAMPLES_PER_S]):
            values = list(self.total[SAMPLES_PER_S].recent)[-window:]
        else:
            for r in self.ranks.values():
                if len(r[key]):
                    values = list(r[key].recent)[-window:]
                    break
        values = sorted(values)
        return values[len(values) // 2] if values else None


def _done_message(done: dict) -> str:
    parts = []
    if done.get(SAMPLES_PER_S) is not None:
        parts.append(f"{done[SAMPLES_PER_S]:,.0f} samples/s (median)")
    if done.get("eval_accuracy") is not None:
        parts.append(f"accuracy {done['eval_accuracy']:.1%}")
    if done.get("wall_s") is not None:
        parts.append(f"{done['wall_s']:.1f} s")
    if done.get("ended_note"):
        parts.append(done["ended_note"])
    return ", ".join(parts)
