"""Servers compared side by side through the trial engine (workbench.trials.engine): both warm,
slices of closed-loop load alternating A B B A, the ratio of their throughput with its interval
and the one verdict rule, and each side's latency percentiles pooled over its slices.

    report = compare_servers({"eager": url_a, "batched": url_b}, concurrency=16, rounds=8)
    report["batched"]["text"]   # '2.91x [2.70, 3.10] over 8 pairs, quiet: faster'

Runs in the process that drives the servers; they are its children (workbench.serving.process),
so the contention reading leaves them out with this process and counts only other programs.
"""

from __future__ import annotations

import asyncio
import os
import time

import aiohttp
import psutil

from ..config import ConfigError
from ..machine.contention import ContentionMeter
from ..trials.engine import Slice, Trial
from .latency import summarize
from .load import TIMEOUT_S, Level, body_for, health_of, run_level

SLICE_S = 2.0  # seconds of load a slice: many requests, and the load's own start left out
SETTLE_S = 0.2  # of each slice, left out first: the clients' connections opening


class LoadHost:
    """Servers as a trial's variants: a slice is `seconds` of closed-loop load at `concurrency`
    against one of them; its work is the requests answered."""

    def __init__(self, urls: dict[str, str], concurrency: int):
        self.urls, self.concurrency = {k: u.rstrip("/") for k, u in urls.items()}, concurrency
        self.refused: dict[str, int] = {k: 0 for k in urls}  # every slice, warm-up included
        self.failed: dict[str, int] = {k: 0 for k in urls}
        said = asyncio.run(self._health())
        shapes = {str(s["input"]) for s in said}
        if len(shapes) > 1:
            raise ConfigError(f"the servers take different inputs: {', '.join(sorted(shapes))}")
        self.body = body_for(said[0])
        # the servers' work is the measured work: other programs are what is left
        self.server_pids = tuple(s["pid"] for s in said if s.get("pid") and _here(s["pid"]))

    async def _health(self) -> list[dict]:
        async with aiohttp.ClientSession() as session:
            return [await health_of(session, url) for url in self.urls.values()]

    def slice(self, label: str, seconds: float) -> Slice:
        meter = ContentionMeter(os.getpid(), also=self.server_pids)
        t0 = time.perf_counter()
        result = asyncio.run(self._load(label, seconds))
        seen = meter.read()
        answered = [r.done - r.scheduled for r in result.requests if r.outcome == "answered"]
        for outcome, count in (("refused", self.refused), ("failed", self.failed)):
            count[label] += sum(r.outcome == outcome for r in result.requests)
        return Slice(
            label,
            len(answered),
            result.window_s,
            seen["own_cpu_cores"] * (time.perf_counter() - t0),
            seen["other_cpu_cores"],
            steps=len(result.requests),
            losses=answered,  # kept with the slice; pooled for the label's percentiles below
        )

    async def _load(self, label: str, seconds: float):
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)
        ) as session:
            level = Level("concurrency", self.concurrency)
            return await run_level(session, self.urls[label], self.body, level, seconds, SETTLE_S)


def _here(pid: int) -> bool:
    """A server process on this machine (a pid a server elsewhere reports may name anything here,
    so only a workbench server process counts)."""
    try:
        return "serve" in psutil.Process(pid).cmdline()
    except psutil.Error:
        return False


def compare_servers(
    urls: dict[str, str],
    reference: str | None = None,
    concurrency: int = 1,
    rounds: int = 8,
    slice_s: float = SLICE_S,
    on_round=None,
) -> dict:
    """label -> its throughput against the reference's (a Comparison's record and text) and its
    latency figures over its counted slices."""
    host = LoadHost(urls, concurrency)
    trial = Trial({k: host for k in urls}, reference, slice_s=slice_s).run(rounds, on_round=on_round)
    out = {"reference": trial.reference, "concurrency": concurrency, "rounds": trial.rounds, "variants": {}}
    for label in urls:
        slices = trial.slices[label]
        latencies = [v for s in slices for v in s.losses]
        sent = sum(s.steps or 0 for s in slices)
        window = sum(s.wall_s for s in slices)
        figures = summarize(latencies, window, sent, host.refused[label], host.failed[label])
        out["variants"][label] = {"url": urls[label], **figures}  # refused and failed: warm-up too
        if label != trial.reference:
            c = trial.compare(label)
            out["variants"][label].update(c.as_dict("throughput"), text=c.text())
    return out
