"""Requests that arrive together share a forward, up to the batch size, each getting its own rows
back; without batching every request is its own forward; a client gone before its turn is
skipped; a forward that raises reaches every request of its batch."""

from __future__ import annotations

import asyncio

import pytest
import torch

from workbench.serving.batching import Batcher


def _run(max_batch, max_wait_ms, sizes, forward=lambda x: x * 2):
    async def go():
        batcher = Batcher(forward, max_batch, max_wait_ms)
        batcher.start()
        try:
            xs = [torch.full((n, 3), float(i)) for i, n in enumerate(sizes)]
            outs = await asyncio.gather(*(batcher.infer(x) for x in xs), return_exceptions=True)
            return xs, outs, batcher.batches
        finally:
            await batcher.stop()

    return asyncio.run(go())


def test_requests_arriving_together_share_forwards_and_get_their_own_rows():
    xs, outs, batches = _run(8, 50, [1] * 16)
    assert batches == 2  # 16 requests of 1 sample, 8 to a forward
    assert all(torch.equal(out, x * 2) for x, out in zip(xs, outs))


def test_without_batching_every_request_is_its_own_forward():
    xs, outs, batches = _run(1, 0, [1] * 5)
    assert batches == 5 and all(torch.equal(out, x * 2) for x, out in zip(xs, outs))


def test_a_request_that_would_overfill_a_batch_opens_the_next_in_order():
    xs, outs, batches = _run(4, 50, [3, 3, 1])
    assert batches == 2 and all(torch.equal(out, x * 2) for x, out in zip(xs, outs))


def test_a_forward_that_raises_reaches_every_request_of_its_batch_and_the_next_batch_runs():
    calls = []

    def forward(x):
        calls.append(len(x))
        if len(calls) == 1:
            raise RuntimeError("boom")
        return x

    _, outs, _ = _run(2, 50, [1, 1, 1], forward)
    assert [type(o) for o in outs[:2]] == [RuntimeError, RuntimeError] and torch.is_tensor(outs[2])


def test_a_client_gone_before_its_turn_is_skipped():
    async def go():
        seen = []
        batcher = Batcher(lambda x: seen.append(len(x)) or x, 4, 100)
        batcher.start()
        gone = asyncio.ensure_future(batcher.infer(torch.zeros(1, 3)))
        await asyncio.sleep(0)  # queued
        gone.cancel()
        kept = await batcher.infer(torch.ones(2, 3))
        await batcher.stop()
        return seen, kept

    seen, kept = asyncio.run(go())
    assert seen == [2] and torch.equal(kept, torch.ones(2, 3))


@pytest.mark.parametrize("bad", [0, -1])
def test_max_batch_below_one_is_refused_by_the_settings(bad):
    from workbench.config import ConfigError
    from workbench.serving.bounds import Settings

    with pytest.raises(ConfigError, match="--max-batch must be 1-256"):
        Settings(max_batch=bad).check()
