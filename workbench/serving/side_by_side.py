"""Servers compared side by side through the trial engine (workbench.trials.engine): both warm,
slices of closed-loop load alternating A B B A, the ratio of their throughput with its interval
and the one verdict rule, and each side's latency percentiles pooled over its slices.

    report = compare_servers({"eager": url_a, "batched": url_b}, concurrency=16, rounds=8)
    report["batched"]["text"]   # '2.91x [2.70, 3.10] over 8 pairs, quiet: faster'

Runs in the process that drives the servers; they are its children (workbench.serving.process),
so the contention reading leaves them out with this process and counts only other programs.
"""

from __future__ import annotations

import os
import time

import aiohttp
import psutil

from ..config import ConfigError
from ..machine.contention import ContentionMeter
from ..measure.order import order_of
from ..trials.engine import Slice, Trial
from .latency import summarize
from .load_generator import TIMEOUT_S, Level, body_for, health_of, run_coroutine, run_level

SLICE_S = 2.0  # seconds of load a slice: many requests, and the load's own start left out
SETTLE_S = 0.2  # of each slice, left out first: the clients' connections opening
CHUNK_S = 0.1  # one server's shortest turn inside a slice, before the other's
# A turn lasts this many of the server's median latencies at least: each turn ends by waiting for
# the requests under way (about one latency), which then costs a turn a tenth of its time at most
LATENCIES_A_TURN = 10


class LoadHost:
    """Servers as a trial's variants: a slice is `seconds` of closed-loop load at `concurrency`
    against one of them; its work is the requests answered."""

    def __init__(self, urls: dict[str, str], concurrency: int):
        self.urls, self.concurrency = {k: u.rstrip("/") for k, u in urls.items()}, concurrency
        self.turn_s: dict[str, float] = {k: CHUNK_S for k in urls}  # grown from the latencies seen
        self.refused: dict[str, int] = {k: 0 for k in urls}  # every slice, warm-up included
        self.failed: dict[str, int] = {k: 0 for k in urls}
        said = run_coroutine(self._health())
        takes = {str([s["input"].get(k) for k in ("shape", "dtype", "vocab")]) for s in said}
        if len(takes) > 1:
            raise ConfigError(
                f"the servers take different inputs ([shape, dtype, vocab]): {', '.join(sorted(takes))}"
            )
        self.body = body_for(said[0])
        self.threads = {k: s.get("threads", "") for k, s in zip(self.urls, said)}  # each one's plan, said
        # the servers' work is the measured work: other programs are what is left
        self.server_pids = tuple(s["pid"] for s in said if s.get("pid") and _here(s["pid"]))

    async def _health(self) -> list[dict]:
        async with aiohttp.ClientSession() as session:
            return [await health_of(session, url) for url in self.urls.values()]

    def slice(self, label: str, seconds: float) -> Slice:
        return self.pair([label], seconds)[label]

    def pair(self, labels: list[str], seconds: float) -> dict[str, Slice]:
        """`seconds` of load on each of `labels`, in turns alternating A B B A, so the servers meet
        the same machine moment by moment: turns of CHUNK_S, or LATENCIES_A_TURN of a server's
        median latency where that is longer. Each one's connections stay open across its turns,
        and its first SETTLE_S (the connections opening) is left out."""
        meter = ContentionMeter(os.getpid(), also=self.server_pids)
        t0 = time.perf_counter()
        done = run_coroutine(self._turns(labels, seconds))
        seen = meter.read()
        wall = time.perf_counter() - t0
        out = {}
        for label, results in done.items():
            requests = [r for res in results for r in res.requests]
            answered = [r.done - r.scheduled for r in requests if r.outcome == "answered"]
            for outcome, count in (("refused", self.refused), ("failed", self.failed)):
                count[label] += sum(r.outcome == outcome for r in requests)
            window = sum(res.window_s for res in results)
            out[label] = Slice(
                label,
                len(answered),
                window,
                seen["own_cpu_cores"]
                * wall
                * window
                / max(1e-9, sum(sum(x.window_s for x in v) for v in done.values())),
                seen["other_cpu_cores"],
                steps=len(requests),
                losses=answered,  # kept with the slice; pooled for the label's percentiles
            )
        return out

    async def _turns(self, labels: list[str], seconds: float) -> dict[str, list]:
        level = Level("concurrency", self.concurrency)
        sessions = {
            k: aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)
            )
            for k in labels
        }
        done: dict[str, list] = {k: [] for k in labels}
        spent = {k: 0.0 for k in labels}
        try:
            turn = 0
            while any(spent[k] < seconds for k in labels):
                for label in order_of(labels, turn):
                    chunk = min(self.turn_s[label], seconds - spent[label])
                    if chunk <= 0:
                        continue
                    settle = SETTLE_S if turn == 0 else 0.0
                    result = await run_level(
                        sessions[label], self.urls[label], self.body, level, chunk, settle
                    )
                    done[label].append(result)
                    spent[label] += max(chunk, result.window_s)
                    answered = sorted(
                        r.done - r.scheduled for r in result.requests if r.outcome == "answered"
                    )
                    if answered:  # a turn holds many of its requests' latencies: its ends cost little
                        p50 = answered[len(answered) // 2]
                        self.turn_s[label] = max(CHUNK_S, LATENCIES_A_TURN * p50)
                turn += 1
        finally:
            for session in sessions.values():
                await session.close()
        return done


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
    latency figures over its counted slices (refused and failed: the warm-up's too).

    :param urls: label -> a server's address (http://HOST:PORT); the servers must take the same input.
    :param reference: the label the others are compared against; None: the first in `urls`.
    :param concurrency: the clients, each sending its next request once the last is answered.
    :param rounds: the pairs to count for each server (a pair dropped because the load changed inside
        it is measured again, up to as many extra rounds).
    :param slice_s: seconds of load on one server in a slice.
    :param on_round: called with no arguments after each round; None: nothing is called.
    """
    host = LoadHost(urls, concurrency)
    trial = Trial({k: host for k in urls}, reference, slice_s=slice_s).run(rounds, on_round=on_round)
    out = {"reference": trial.reference, "concurrency": concurrency, "rounds": trial.rounds, "variants": {}}
    for label in urls:
        slices = trial.slices[label]
        latencies = [v for s in slices for v in s.losses]
        sent = sum(s.steps or 0 for s in slices)
        window = sum(s.wall_s for s in slices)
        figures = summarize(latencies, window, sent, host.refused[label], host.failed[label])
        out["variants"][label] = {"url": urls[label], "threads": host.threads[label], **figures}
        if label != trial.reference:
            c = trial.compare(label)
            out["variants"][label].update(c.as_dict("throughput"), text=c.text())
    return out


def sentences(report: dict) -> list[str]:
    """What the comparison found, one sentence a variant, every figure from the report: its
    throughput against the reference's with the interval and verdict, and both p99s."""
    ref = report["variants"][report["reference"]]
    out = []
    for label, v in report["variants"].items():
        if label == report["reference"]:
            continue
        out.append(
            f"{label}: throughput {v['text']} against {report['reference']} at concurrency "
            f"{report['concurrency']}; p99 {v['p99_ms']:.1f} ms against {ref['p99_ms']:.1f} ms"
        )
    return out
