"""Watch a running run's events and say when it must be failed: ranks not ready in time, or a rank
that stopped making progress. Used by the supervisor every few hundred milliseconds; stdlib only.

Progress is a `ready` or `step` record. Each rank also writes a `heartbeat` record every second from
a thread (workbench.train.heartbeat) with the last step it finished and where its main thread is, so a
stalled rank is named, and said to be alive (stuck somewhere) or frozen.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..config import RunConfig
from ..events import RunTail


def stall_after_s(timeout_s: float) -> float:
    """Give the collective timeout (distributed.timeout_s) the first chance to fire, then fail."""
    return timeout_s + max(5.0, 0.5 * timeout_s)


@dataclass
class RankState:
    started_t: float | None = None
    ready_t: float | None = None
    progress_t: float | None = None  # last ready/step record
    step: int = 0
    ended: str | None = None  # done | failed | stopped
    beat_t: float | None = None
    where: str = ""


@dataclass
class Watchdog:
    run_dir: Path
    cfg: RunConfig
    t0: float = field(default_factory=time.time)

    def __post_init__(self):
        self._tail = RunTail(self.run_dir)
        self.ranks: dict[tuple[int, int], RankState] = {}  # (attempt, rank) -> state

    def update(self) -> None:
        for r in self._tail.poll():
            key = (int(r.get("attempt", 0)), int(r.get("rank", 0)))
            s = self.ranks.setdefault(key, RankState())
            ev, t = r.get("event"), float(r.get("t", 0))
            if ev == "start":
                s.started_t = t
            elif ev == "ready":
                s.ready_t = s.progress_t = t
            elif ev == "step":
                s.progress_t, s.step = t, int(r.get("step", s.step))
            elif ev == "heartbeat":
                s.beat_t, s.where = t, r.get("where", "")
            elif ev == "done":
                s.ended = "done"
            elif ev == "error":
                s.ended = r.get("status", "failed")

    def attempt(self) -> int:
        return max((a for a, _ in self.ranks), default=0)

    def current(self) -> dict[int, RankState]:
        a = self.attempt()
        return {rank: s for (att, rank), s in self.ranks.items() if att == a}

    def check(self, now: float | None = None) -> dict | None:
        """None while the run looks healthy, else {cause, message, ranks}."""
        self.update()
        now = time.time() if now is None else now
        d = self.cfg.distributed
        ranks = self.current()
        if any(s.ended for s in ranks.values()):
            return None  # a rank ended: torchrun tears the group down, the diagnosis follows
        starts = [s.started_t for s in ranks.values() if s.started_t]
        window_start = self.t0 if self.attempt() == 0 or not starts else min(starts)
        ready = [r for r, s in ranks.items() if s.ready_t]
        if len(ready) < d.nproc:
            if now - window_start <= d.start_timeout_s:
                return None
            return {"cause": "start_timeout", "ranks": sorted(set(ranks) - set(ready)),
                    "message": self._start_message(ranks, ready)}
        stall_s = stall_after_s(d.timeout_s)
        stalled = []
        for rank, s in ranks.items():
            if s.step >= self.cfg.run.steps:
                continue  # evaluating and saving after the last step
            limit = stall_s if s.step else max(stall_s, d.start_timeout_s)  # first step may compile
            if now - s.progress_t > limit:
                stalled.append(rank)
        if not stalled:
            return None
        parts = [self._stall_text(r, ranks[r], now) for r in sorted(stalled)]
        return {"cause": "stalled", "ranks": sorted(stalled),
                "message": "; ".join(parts) + f" (distributed.timeout_s={d.timeout_s:g})"}

    def _start_message(self, ranks: dict[int, RankState], ready: list[int]) -> str:
        d = self.cfg.distributed
        where = d.rdzv_endpoint or "127.0.0.1 (single node)"
        if not ranks:
            return (f"no rank started within distributed.start_timeout_s={d.start_timeout_s:g} s: "
                    f"torchrun is still waiting in rendezvous at {where}. Check that the endpoint "
                    f"is reachable, not held by another server, and that all {d.nnodes} node(s) "
                    "were started with the same endpoint")
        missing = sorted(set(ranks) - set(ready))
        return (f"rank(s) {missing} started but did not report ready within "
                f"distributed.start_timeout_s={d.start_timeout_s:g} s ({len(ready)} of {d.nproc} "
                "ready): stuck joining the process group or building the model")

    @staticmethod
    def _stall_text(rank: int, s: RankState, now: float) -> str:
        text = f"rank {rank} stalled after step {s.step}: no progress for {now - s.progress_t:.0f} s"
        if s.beat_t and now - s.beat_t < 3.0:
            text += f", still alive, in {s.where}" if s.where else ", still alive"
        elif s.beat_t:
            text += f", no heartbeat for {now - s.beat_t:.0f} s (frozen), last in {s.where}"
        return text
