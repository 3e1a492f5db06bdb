"""Watch a running run's events and say when it must be failed: ranks not ready in time, or a rank
that stopped making progress. Used by the supervisor every few hundred milliseconds; stdlib and
psutil, no torch.

Progress is a `ready` or `step` record. Each rank also writes a `heartbeat` record every second from
a thread (workbench.train.heartbeat) with the last step it finished, where its main thread is and
which part of a step it is in, so a stalled rank is named, and said to be alive (stuck somewhere)
or frozen. Ranks wait for each other in collectives (DDP's in backward, FSDP's in forward too): where
some ranks are further on in the steps than others, the ones behind are those everyone waits for,
and they alone are judged and named; the others are said to wait for them. The watchdog also looks at
each rank's process (the pid of its `start` record): a process stopped by SIGSTOP (or a debugger)
is frozen, and once the other ranks' collectives time out waiting for a frozen or stuck rank, the
diagnosis is made at once, before torchrun's teardown kills that rank and hides why.

Across machines, when every rank of this node has timed out waiting for the others, the watchdog
asks whether the other nodes still answer on the network (a TCP connection to the rendezvous port,
accepted or refused, from each rank's address gathered at start): a node that does not, its link
cut or the machine down, is named at once. torchrun could neither restart nor close its rendezvous
without it, and on a node cut off from the head it would wait in store calls (60 s each).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ..config import RunConfig
from ..events import (
    ADDRESSES,
    ATTEMPT,
    CREATED_T,
    DONE,
    ERROR,
    EVENT,
    HEARTBEAT,
    LAST,
    PART,
    PID,
    RANK,
    READY,
    START,
    STATUS,
    STEP,
    STEP_NUMBER,
    STEP_PARTS,
    TIME,
    WHERE,
    RunTail,
)
from ..net import answers
from ..procs import same_process
from .faults import Diagnosis, is_knock_on, stall_message
from .torchrun import WORKER

STOPPED = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
PATIENCE = 5  # a rank is given this many times its slowest step seen on this machine, at least


def stall_after_s(timeout_s: float) -> float:
    """Give the collective timeout (distributed.timeout_s) the first chance to fire, then fail."""
    return timeout_s + max(5.0, 0.5 * timeout_s)


@dataclass
class RankState:
    started_t: float | None = None
    ready_t: float | None = None
    progress_t: float | None = None  # last ready/step record
    step: int = 0
    slowest_step_s: float = 0.0  # the longest wait between two of its step records (after step 1)
    last_step: bool = False  # its time budget ended its steps: evaluating and saving now
    ended: str | None = None  # done | failed | stopped
    beat_t: float | None = None
    where: str = ""
    beat_step: int = 0  # the last heartbeat's step, and the part of the next one it was in
    part: str | None = None  # None: its heartbeat does not say (a script's own loop)
    pid: int | None = None
    created_t: float | None = None
    ended_t: float | None = None
    own_error: bool = False  # ended by an error of its own, not a reaction to another rank
    frozen_since: float | None = None  # when its process was first seen stopped (state T)
    addresses: list[str] = field(default_factory=list)  # every rank's, from its ready record


@dataclass
class Watchdog:
    run_dir: Path
    cfg: RunConfig
    t0: float = field(default_factory=time.time)
    tree_pid: int | None = None  # the run's first process (torchrun, or the one rank): set once started

    def __post_init__(self):
        self._tail = RunTail(self.run_dir)
        self.ranks: dict[tuple[int, int], RankState] = {}  # (attempt, rank) -> state
        self._answered: dict[tuple[int, str], bool] = {}  # (attempt, address) -> probed once

    def update(self) -> None:
        for r in self._tail.poll():
            key = (int(r.get(ATTEMPT, 0)), int(r.get(RANK, 0)))
            s = self.ranks.setdefault(key, RankState())
            event, t = r.get(EVENT), float(r.get(TIME, 0))
            if event == START:
                s.started_t, s.pid, s.created_t = t, r.get(PID), r.get(CREATED_T)
            elif event == READY:
                s.ready_t = s.progress_t = t
                s.addresses = list(r.get(ADDRESSES) or [])
            elif event == STEP:
                if s.step and s.progress_t:  # the first step (compiling, warming up) left out
                    s.slowest_step_s = max(s.slowest_step_s, t - s.progress_t)
                s.progress_t, s.step = t, int(r.get(STEP_NUMBER, s.step))
                s.last_step = bool(r.get(LAST))
            elif event == HEARTBEAT:
                s.beat_t, s.where = t, r.get(WHERE, "")
                s.beat_step, s.part = int(r.get(STEP_NUMBER, s.step)), r.get(PART)
            elif event == DONE:
                s.ended, s.ended_t = "done", t
            elif event == ERROR:
                s.ended, s.ended_t = r.get(STATUS, "failed"), t
                s.own_error = s.ended == "failed" and not is_knock_on(r)

    def observe(self, now: float) -> None:
        """Note which ranks' processes are stopped (SIGSTOP, SIGTSTP, a debugger)."""
        for s in self.current().values():
            if s.ended or not s.pid:
                continue
            try:
                stopped = psutil.Process(s.pid).status() in STOPPED
            except psutil.Error:
                stopped = False
            s.frozen_since = (s.frozen_since or now) if stopped else None

    def attempt(self) -> int:
        return max((a for a, _ in self.ranks), default=0)

    def current(self) -> dict[int, RankState]:
        a = self.attempt()
        return {rank: s for (att, rank), s in self.ranks.items() if att == a}

    def check(self, now: float | None = None) -> Diagnosis | None:
        """None while the run looks healthy, else the Diagnosis the post-mortem would give."""
        self.update()
        now = time.time() if now is None else now
        d = self.cfg.distributed
        ranks = self.current()
        self.observe(now)
        # a rank that ended done is not a failure: the others may still evaluate or save (rank 0
        # writes the weights); only ranks that ended failing have others to wait for
        failed = [s for s in ranks.values() if s.ended and s.ended != "done"]
        if failed:
            if any(s.own_error for s in failed):
                return None  # a rank raised by itself: the diagnosis names it from its record
            return self._straggler(ranks, min(s.ended_t for s in failed), now) or self.unreachable()
        starts = [s.started_t for s in ranks.values() if s.started_t]
        window_start = self.t0 if self.attempt() == 0 or not starts else min(starts)
        ready = [r for r, s in ranks.items() if s.ready_t]
        if len(ready) < d.nproc:
            if now - window_start <= d.start_timeout_s:
                return None
            return Diagnosis(
                "start_timeout",
                self._start_message(ranks, ready),
                failed_ranks=sorted(set(ranks) - set(ready)),
            )
        # done, or evaluating and saving after the last step: not judged by its steps
        stepping = {
            r: s for r, s in ranks.items() if not (s.ended or s.step >= self.cfg.run.steps or s.last_step)
        }
        stalled = [r for r, s in stepping.items() if now - s.progress_t > self.patience(s)[0]]
        behind = self.waited_for(stepping)
        if stalled and behind:  # the others wait in a collective: judge the ranks they wait for
            stalled = [r for r in behind if now - stepping[r].progress_t > self.patience(stepping[r])[0]]
        return self._stalled(
            ranks, stalled, now, waiting=sorted(set(stepping) - set(behind)) if behind else []
        )

    @staticmethod
    def waited_for(stepping: dict[int, RankState]) -> list[int]:
        """The ranks furthest behind in the steps, by their heartbeats (the step and the part of the
        next), where others are further on: those wait for them. Empty when all are level or a
        heartbeat does not say its part."""
        if len(stepping) < 2 or any(s.part is None or s.beat_t is None for s in stepping.values()):
            return []
        at = {
            r: (s.beat_step, STEP_PARTS.index(s.part) if s.part in STEP_PARTS else -1)
            for r, s in stepping.items()
        }
        last = min(at.values())
        if last == max(at.values()):
            return []
        return sorted(r for r, here in at.items() if here == last)

    def patience(self, s: RankState) -> tuple[float, str]:
        """How long `s` may go without progress, and why: the collective timeout's chance first,
        and on a machine whose steps are slow (a busy one) PATIENCE times its slowest step; the
        first step may compile (the start timeout); a stopped process gets no more than the
        collective timeout."""
        d = self.cfg.distributed
        if s.frozen_since is not None:
            return d.timeout_s, "distributed.timeout_s, its process being stopped"
        limit, why = stall_after_s(d.timeout_s), f"distributed.timeout_s={d.timeout_s:g} and a margin"
        if not s.step and d.start_timeout_s > limit:
            limit, why = d.start_timeout_s, "distributed.start_timeout_s: the first step may compile"
        if PATIENCE * s.slowest_step_s > limit:
            limit = PATIENCE * s.slowest_step_s
            why = f"{PATIENCE}x its slowest step seen, {s.slowest_step_s:.1f} s"
        return limit, why

    def _straggler(self, ranks: dict[int, RankState], end_t: float, now: float) -> Diagnosis | None:
        """Ranks ended with knock-on errors (a collective timed out): the rank they waited for is
        one still running whose last progress came well before, or whose process is stopped."""
        half = 0.5 * self.cfg.distributed.timeout_s
        behind = [
            r
            for r, s in ranks.items()
            if not s.ended
            and s.pid
            and same_process(s.pid, s.created_t)
            and (s.frozen_since is not None or (s.progress_t or s.started_t or now) <= end_t - half)
        ]
        return self._stalled(ranks, behind, now)

    def frozen(self, now: float | None = None) -> Diagnosis | None:
        """After the run's processes exited: a rank whose process was seen stopped is the cause."""
        now = time.time() if now is None else now
        ranks = self.current()
        return self._stalled(ranks, [r for r, s in ranks.items() if s.frozen_since is not None], now)

    def unreachable(self) -> Diagnosis | None:
        """Every rank of this node has ended, none by an error of its own (a timeout, a lost
        connection, or stopped by its torchrun agent, whose store calls failed), in a run across
        machines: the ranks on a node that no longer answers on the network, if any."""
        self.update()
        ranks = self.current()
        if self.cfg.distributed.nnodes == 1 or not ranks or not all(s.ended for s in ranks.values()):
            return None
        if any(s.own_error for s in ranks.values()) or all(s.ended == "done" for s in ranks.values()):
            return None
        addresses = next((s.addresses for s in ranks.values() if s.addresses), [])
        ours = {addresses[r] for r in ranks if r < len(addresses)}
        port = int(str(self.cfg.distributed.rdzv_endpoint).rpartition(":")[2])
        lost: dict[str, list[int]] = {}
        for rank, address in enumerate(addresses):
            if not address or address in ours:
                continue
            key = (self.attempt(), address)
            if key not in self._answered:
                self._answered[key] = answers(address, port)
            if not self._answered[key]:
                lost.setdefault(address, []).append(rank)
        if not lost:
            return None
        nproc = self.cfg.distributed.nproc  # torchrun numbers ranks node by node
        where = "; ".join(
            f"node {ranks_there[0] // nproc} ({address}, rank(s) {', '.join(map(str, ranks_there))})"
            for address, ranks_there in lost.items()
        )
        step = max(s.step for s in ranks.values())
        return Diagnosis(
            "node_unreachable",
            f"lost contact with {where}: it does not answer on the network (its link "
            f"or the machine is down); this node's rank(s) "
            f"{', '.join(map(str, sorted(ranks)))} ended waiting for it after step {step} "
            f"(distributed.timeout_s={self.cfg.distributed.timeout_s:g})",
            failed_ranks=sorted(r for rs in lost.values() for r in rs),
        )

    def _stalled(
        self, ranks: dict[int, RankState], stalled: list[int], now: float, waiting: list[int] = ()
    ) -> Diagnosis | None:
        if not stalled:
            return None
        parts = [self._stall_text(r, ranks[r], now) for r in sorted(stalled)]
        them = "it" if len(stalled) == 1 else "them"
        for r in waiting:
            s = ranks[r]
            at = f"the {s.part} of step {s.beat_step + 1}" if s.part else f"after step {s.beat_step}"
            parts.append(f"rank {r} waits for {them} in {at} (a collective)")
        limit, why = self.patience(ranks[sorted(stalled)[0]])
        timeout = (
            f" (distributed.timeout_s={self.cfg.distributed.timeout_s:g}; "
            f"the patience was {limit:.0f} s without progress: {why})"
        )
        return Diagnosis("stalled", "; ".join(parts) + timeout, failed_ranks=sorted(stalled))

    def _start_message(self, ranks: dict[int, RankState], ready: list[int]) -> str:
        d = self.cfg.distributed
        where = d.rdzv_endpoint or "127.0.0.1 (single node)"
        starting = self._rank_processes() if not ranks else []
        if starting:
            return (
                f"{len(starting)} rank process(es) (pid {', '.join(map(str, starting))}) did not "
                f"start within distributed.start_timeout_s={d.start_timeout_s:g} s: still "
                "starting Python and importing, not waiting in rendezvous (a busy machine or a "
                "slow file system); raise distributed.start_timeout_s"
            )
        if not ranks:
            return (
                f"no rank started within distributed.start_timeout_s={d.start_timeout_s:g} s: "
                f"torchrun started no rank process: it is still starting up (a busy machine) "
                f"or waiting in rendezvous at {where}. Check that the endpoint "
                f"is reachable, not held by another server, and that all {d.nnodes} node(s) "
                "were started with the same endpoint"
            )
        missing = sorted(set(ranks) - set(ready))
        return (
            f"rank(s) {missing} started but did not report ready within "
            f"distributed.start_timeout_s={d.start_timeout_s:g} s ({len(ready)} of {d.nproc} "
            "ready): stuck joining the process group or building the model"
        )

    def _rank_processes(self) -> list[int]:
        """The pids of rank processes in the run's tree that have not written a record yet."""
        try:
            top = psutil.Process(self.tree_pid) if self.tree_pid else None
            procs = [top, *top.children(recursive=True)] if top else []
        except psutil.Error:
            return []
        out = []
        for proc in procs:
            try:
                words = proc.cmdline()
            except psutil.Error:
                continue
            # python's own "-m" names what the process runs (torchrun's arguments name it too)
            if "-m" in words and words[words.index("-m") :][:2] == WORKER:
                out.append(proc.pid)
        return sorted(out)

    @staticmethod
    def _stall_text(rank: int, s: RankState, now: float) -> str:
        quiet_s = now - (s.progress_t or s.started_t or now)
        if s.frozen_since is not None:
            how = f"frozen: its process (pid {s.pid}) is stopped (SIGSTOP or a debugger)"
        elif s.beat_t and now - s.beat_t < 3.0:
            how = "still alive"
        elif s.beat_t:
            how = f"no heartbeat for {now - s.beat_t:.0f} s (frozen)"
        else:
            how = ""
        return stall_message(rank, s.step, where=s.where, quiet_s=quiet_s, how=how)
