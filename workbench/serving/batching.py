"""Dynamic batching: requests that arrive together share one forward.

The first request waiting opens a batch; the batch closes when it holds `max_batch` samples or
`max_wait_ms` after it opened, whichever comes first, and runs on the one model thread while the
event loop goes on taking requests. `max_batch=1` is no batching: each request its own forward,
through the same queue, so the two are compared on the same code.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch


@dataclass
class Waiting:
    x: torch.Tensor
    done: asyncio.Future
    t: float = field(default_factory=time.perf_counter)


class Batcher:
    def __init__(self, forward, max_batch: int = 1, max_wait_ms: float = 0.0):
        self.forward, self.max_batch, self.max_wait_s = forward, max_batch, max_wait_ms / 1e3
        self.queue: asyncio.Queue[Waiting] = asyncio.Queue()
        self.model_thread = ThreadPoolExecutor(1, thread_name_prefix="workbench-model")
        self.batches = self.samples = 0  # what it ran, for the health endpoint
        self._task: asyncio.Task | None = None
        self._next: Waiting | None = None  # a request that did not fit the last batch: opens the next

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self.model_thread.shutdown(wait=True, cancel_futures=True)

    async def infer(self, x: torch.Tensor) -> torch.Tensor:
        """The model's output for `x` (n samples), from whichever batch it joined."""
        if self.max_batch == 1:  # no batching: straight to the model thread, which runs one at a time
            out = await asyncio.get_running_loop().run_in_executor(self.model_thread, self.forward, x)
            self.batches += 1
            self.samples += len(x)
            return out
        waiting = Waiting(x, asyncio.get_running_loop().create_future())
        await self.queue.put(waiting)
        return await waiting.done

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [self._next or await self.queue.get()]
            self._next = None
            held = len(batch[0].x)
            closes = loop.time() + self.max_wait_s
            while held < self.max_batch:
                try:
                    nxt = (
                        self.queue.get_nowait()
                        if self.max_wait_s <= 0
                        else await asyncio.wait_for(self.queue.get(), max(0.0, closes - loop.time()))
                    )
                except (asyncio.QueueEmpty, asyncio.TimeoutError):
                    break
                if held + len(nxt.x) > self.max_batch:  # a request of several samples
                    self._next = nxt
                    break
                batch.append(nxt)
                held += len(nxt.x)
            batch = [w for w in batch if not w.done.cancelled()]  # clients gone while they waited
            if not batch:
                continue
            try:
                out = await loop.run_in_executor(
                    self.model_thread, self.forward, torch.cat([w.x for w in batch])
                )
            except Exception as e:  # noqa: BLE001 - every waiting request hears of it
                for w in batch:
                    if not w.done.done():
                        w.done.set_exception(e)
                continue
            self.batches += 1
            self.samples += held
            start = 0
            for w in batch:
                if not w.done.done():
                    w.done.set_result(out[start : start + len(w.x)])
                start += len(w.x)
