"""Drive a server the way its users would, and say what they would wait.

    levels = [Level("concurrency", 4), Level("rate", 200)]
    report = run_coroutine(drive("http://127.0.0.1:8700", levels, duration_s=5))

Closed loop (`concurrency`): that many clients, each sending its next request when the last is
answered. Open loop (`rate`): requests at Poisson arrival times whatever the server does, and each
latency counts from the request's scheduled send time, so a server that falls behind cannot hide
its queue behind a client that waited for it. Each level's first `warmup_s` is left out of its
figures (counted, and said). Every request is accounted for: answered (2xx), refused (another
HTTP status, with the server's line) or failed (no answer: refused connection, reset, timeout).
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from dataclasses import dataclass, field

import aiohttp

from ..config import ConfigError
from .latency import summarize
from .bounds import MAX_REQUESTS

TIMEOUT_S = 30.0  # one request's longest wait before it counts as failed
WINDOW_S = 1.0  # a load run's step: what the requests that ended in each measured second met


def run_coroutine(coro):
    """Run `coro` to its end, from a terminal or from a notebook cell (whose kernel already runs an
    event loop on this thread: the coroutine gets a thread and a loop of its own)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict = {}

    def own_loop():
        try:
            box["result"] = asyncio.run(coro)
        except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
            box["error"] = e

    thread = threading.Thread(target=own_loop, name="workbench-load")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


@dataclass(frozen=True)
class Level:
    kind: str  # "concurrency" (closed loop) or "rate" (open loop, requests per second)
    value: float

    @property
    def name(self) -> str:
        return f"concurrency {self.value:g}" if self.kind == "concurrency" else f"rate {self.value:g}/s"


@dataclass
class Sent:
    scheduled: float  # when it was to be sent (open loop), or sent (closed loop)
    done: float = 0.0
    outcome: str = ""  # answered | refused | failed
    detail: str = ""  # a refusal's line or a failure's cause


@dataclass
class LevelResult:
    level: Level
    window_s: float
    requests: list[Sent] = field(default_factory=list)  # in the measured window
    warmup: int = 0  # requests in the warm-up, left out

    def record(self) -> dict:
        answered = [r.done - r.scheduled for r in self.requests if r.outcome == "answered"]
        out = {
            "level": self.level.name,
            "kind": self.level.kind,
            "value": self.level.value,
            "window_s": round(self.window_s, 3),
            "warmup_requests": self.warmup,
            **summarize(
                answered,
                self.window_s,
                len(self.requests),
                sum(r.outcome == "refused" for r in self.requests),
                sum(r.outcome == "failed" for r in self.requests),
            ),
        }
        causes = sorted({r.detail for r in self.requests if r.outcome != "answered" and r.detail})
        if causes:
            out["causes"] = causes[:5]
        return out


def body_for(health: dict, seed: int = 0) -> bytes:
    """One sample of the input the server says it takes (GET /health), random but never zeros."""
    schema = health["input"]
    rnd = random.Random(seed)
    count = 1
    for d in schema["shape"]:
        count *= d
    if "vocab" in schema:
        flat = [rnd.randrange(max(1, schema["vocab"])) for _ in range(count)]
    else:
        flat = [round(rnd.uniform(0.01, 1.0), 4) for _ in range(count)]
    for d in reversed(schema["shape"][1:]):
        flat = [flat[i : i + d] for i in range(0, len(flat), d)]
    return json.dumps({"inputs": flat}).encode()


async def health_of(session: aiohttp.ClientSession, url: str) -> dict:
    try:
        async with session.get(f"{url}/health", timeout=aiohttp.ClientTimeout(total=10)) as r:
            if r.status != 200:
                raise ConfigError(f"{url}/health answered {r.status}: {(await r.text())[:200]}")
            return await r.json()
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        raise ConfigError(f"no server answers at {url}: {type(e).__name__}: {e}") from None


async def _send(session, url: str, body: bytes, sent: Sent) -> None:
    try:
        async with session.post(
            f"{url}/predict", data=body, headers={"content-type": "application/json"}
        ) as r:
            text = await r.read()
            sent.outcome = "answered" if r.status == 200 else "refused"
            if r.status != 200:
                try:
                    sent.detail = f"{r.status}: {json.loads(text).get('error', '')}"[:200]
                except (ValueError, AttributeError):
                    sent.detail = f"{r.status}"
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        sent.outcome, sent.detail = "failed", type(e).__name__
    sent.done = time.perf_counter()


def window_record(level: Level, seconds: float, ended: list[Sent]) -> dict:
    """One window of a measured level: its requests accounted for, throughput and percentiles."""
    answered = [s.done - s.scheduled for s in ended if s.outcome == "answered"]
    return {
        "level": level.name,
        "kind": level.kind,
        "value": level.value,
        "seconds": seconds,
        **summarize(
            answered,
            seconds,
            len(ended),
            sum(s.outcome == "refused" for s in ended),
            sum(s.outcome == "failed" for s in ended),
        ),
    }


async def _windows(everything: list[Sent], level: Level, begins: float, stop: asyncio.Event, on_window):
    """Every WINDOW_S from `begins` until `stop`: `on_window(record)` for the measured requests
    that ended in that window (a last window under half as long is left out)."""
    t0 = begins
    while True:
        try:
            await asyncio.wait_for(stop.wait(), max(0.0, t0 + WINDOW_S - time.perf_counter()))
        except asyncio.TimeoutError:
            pass
        t1 = time.perf_counter() if stop.is_set() else t0 + WINDOW_S
        if t1 - t0 >= WINDOW_S / 2:
            ended = [s for s in everything if s.scheduled >= begins and s.done and t0 <= s.done < t1]
            on_window(window_record(level, t1 - t0, ended))
        if stop.is_set():
            return
        t0 = t1


async def run_level(
    session,
    url: str,
    body: bytes,
    level: Level,
    duration_s: float,
    warmup_s: float,
    requests: int = MAX_REQUESTS,
    seed: int = 0,
    on_window=None,
) -> LevelResult:
    start = time.perf_counter()
    measured_from, ends = start + warmup_s, start + warmup_s + duration_s
    everything: list[Sent] = []
    stop = asyncio.Event()
    windows = (
        asyncio.create_task(_windows(everything, level, measured_from, stop, on_window))
        if on_window
        else None
    )
    if level.kind == "concurrency":

        async def client():
            while time.perf_counter() < ends and len(everything) < requests:
                sent = Sent(time.perf_counter())
                everything.append(sent)
                await _send(session, url, body, sent)

        await asyncio.gather(*(client() for _ in range(int(level.value))))
    else:
        rnd, tasks, at = random.Random(seed), [], start
        while len(tasks) < requests:
            at += rnd.expovariate(level.value)
            if at >= ends:
                break
            await asyncio.sleep(max(0.0, at - time.perf_counter()))
            sent = Sent(at)
            everything.append(sent)
            tasks.append(asyncio.create_task(_send(session, url, body, sent)))
        await asyncio.gather(*tasks)
    stop.set()
    if windows is not None:
        await windows
    window = [s for s in everything if s.scheduled >= measured_from]
    last = max((s.done for s in window), default=ends)
    return LevelResult(
        level, max(1e-9, last - measured_from) if window else 0.0, window, len(everything) - len(window)
    )


async def drive(
    url: str,
    levels: list[Level],
    duration_s: float = 5.0,
    warmup_s: float = 1.0,
    requests: int = MAX_REQUESTS,
    on_level=None,
    on_start=None,
    on_window=None,
) -> dict:
    """Each level in turn against the server at `url`; `on_start(health)` hears what the server
    said of itself, `on_window(record)` each measured second (WINDOW_S) as it ends, and
    `on_level(record)` each level as it ends.

    :param url: the server's address (http://HOST:PORT); one whose GET /health does not answer 200 is
        a ConfigError.
    :param levels: the loads in turn: Level("concurrency", N) clients in a closed loop, or
        Level("rate", R) requests a second in an open loop.
    :param duration_s: seconds each level is measured, after its warm-up.
    :param warmup_s: seconds at the start of each level whose requests are left out of its figures.
    :param requests: the most requests a level sends, its warm-up included.
    :param on_level: called with each level's record as it ends; None: nothing is called.
    :param on_start: called with what the server's /health said, before the first level; None: nothing
        is called.
    :param on_window: called with each measured window's record (WINDOW_S seconds) as it ends; None:
        nothing is called.
    """
    url = url.rstrip("/")
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        health = await health_of(session, url)
        if on_start is not None:
            on_start(health)
        body = body_for(health)
        records = []
        for level in levels:
            result = await run_level(
                session, url, body, level, duration_s, warmup_s, requests, on_window=on_window
            )
            records.append(result.record())
            if on_level is not None:
                on_level(records[-1])
    return {
        "url": url,
        "server": health,
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        "requests": requests,
        "levels": records,
    }
