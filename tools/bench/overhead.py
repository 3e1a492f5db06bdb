"""What the workbench's instrumentation costs.

    python -m tools.bench overhead        (or: make bench)

1. The worker's instrumented training loop against a bare PyTorch loop on the same model, data,
   optimizer and precision, interleaved in one process; per-step wall time from the first step
   after warm-up to the last; paired rounds until the interval is narrow enough to decide the
   goal. Goal: at most 3 % overhead for the default CPU model.
2. The per-step bookkeeping alone (clock reads, the step record written, memory on a timer).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from workbench.trials.engine import order_of
from workbench.config import RunConfig
from workbench.events import (
    DATA_WAIT_MS,
    EVENT,
    LOSS,
    MFU,
    SAMPLES_PER_S,
    STEP,
    STEP_NUMBER,
    STEP_TIME_MS,
    TFLOPS,
    TIME,
    EventWriter,
    read_events,
)
from workbench.machine.contention import ContentionMeter, busy_sentence
from workbench.measure.ratios import paired_ratio
from workbench.train.data import build_data, make_loader
from workbench.train.memory_readings import sample
from workbench.train.models import build_model, loss_fn
from workbench.train.precision import autocast, grad_scaler
from workbench.train.rank import RankEnv
from workbench.train.step import cycle_batches
from workbench.train.trainer import train
from .results import recorded

WARMUP = 20


def instrumented_step_s(cfg: RunConfig) -> float:
    """Seconds per step of the real worker loop, from its own events' wall-clock stamps."""
    with tempfile.TemporaryDirectory() as tmp:
        events = EventWriter(tmp)
        train(cfg, events, RankEnv(), Path(tmp))
        events.close()
        steps = [r for r in read_events(tmp) if r[EVENT] == STEP]
    first, last = steps[WARMUP - 1], steps[-1]
    # The first stamp is taken after its step ends, so the span covers steps WARMUP+1..N.
    return (last[TIME] - first[TIME]) / (last[STEP_NUMBER] - first[STEP_NUMBER])


def bare_step_s(cfg: RunConfig) -> float:
    """The same training with nothing but the loop a person would write (loss.item() included)."""
    torch.manual_seed(cfg.run.seed)
    device = torch.device("cpu")
    data = build_data(cfg)
    model = build_model(cfg, data)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    scaler, amp, lossf = grad_scaler(cfg, device), autocast(cfg, device), loss_fn(data.task)
    batches = cycle_batches(make_loader(data.train, cfg, train=True, seed=cfg.run.seed))
    t0 = 0.0
    for step in range(1, cfg.run.steps + 1):
        if step == WARMUP + 1:
            t0 = time.perf_counter()
        x, y = next(batches)
        with amp:
            loss = lossf(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        loss.item()
    return (time.perf_counter() - t0) / (cfg.run.steps - WARMUP)


def _quiet(cfg: RunConfig) -> RunConfig:
    return cfg.replace(**{"run.eval_batches": 0, "run.save_weights": False, "run.device": "cpu"})


def overhead(max_rounds: int = 40, threads: int = 1, goal_half_width: float = 0.01) -> None:
    """One thread by default: with two, rounds on this shared 2-core machine wander by +-20 %,
    far more than the few microseconds per step being measured."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        _overhead(max_rounds, goal_half_width)
    finally:
        torch.set_num_threads(before)


def _overhead(max_rounds: int, goal_half_width: float) -> None:
    """Paired rounds (bare, workbench; then workbench, bare; ...) until the interval of the median
    ratio is narrower than +-goal_half_width, or max_rounds."""
    cfg = _quiet(RunConfig.default())
    samples = {"bare": [], "workbench": []}
    meter = ContentionMeter()
    ratio = None
    for r in range(max_rounds):
        for name in order_of(["bare", "workbench"], r):
            samples[name].append(bare_step_s(cfg) if name == "bare" else instrumented_step_s(cfg))
        ratio = paired_ratio(samples["workbench"], samples["bare"])  # workbench time / bare time
        if ratio.low is not None and (ratio.high - ratio.low) / 2 < goal_half_width:
            break
    bare, wb = statistics.median(samples["bare"]), statistics.median(samples["workbench"])
    print(
        f"default model ({cfg.model.name} width {cfg.model.width}, batch {cfg.loader.batch_size}, "
        f"{cfg.run.steps} steps, {torch.get_num_threads()} thread(s), rounds until the interval "
        f"is within +-{goal_half_width:.0%} or {max_rounds} rounds)"
    )
    print(f"  bare loop       {bare * 1e3:8.3f} ms/step")
    print(f"  workbench loop  {wb * 1e3:8.3f} ms/step")
    low = f"{ratio.low - 1:+.1%}" if ratio.low is not None else "?"
    high = f"{ratio.high - 1:+.1%}" if ratio.high is not None else "?"
    decided = (
        "decided: within the goal"
        if ratio.high is not None and ratio.high <= 1.03
        else "decided: over the goal"
        if ratio.low is not None and ratio.low > 1.03
        else "not decided: the interval straddles the goal"
    )
    print(
        f"  overhead        {ratio.ratio - 1:+.1%} [{low}, {high}] over {ratio.rounds} paired "
        f"rounds (goal <= +3 %; {decided})"
    )
    busy = busy_sentence(meter.read())
    if busy:
        print(f"  machine busy: {busy}")
    per_step = bookkeeping_us()
    print(
        f"  per-step bookkeeping measured alone: {per_step:.1f} us = "
        f"{per_step / (bare * 1e6) * 100:.2f} % of a bare step"
    )


def bookkeeping_us(n: int = 20000) -> float:
    """What the loop adds per step besides the training itself: clock reads, the step record
    (as many keys as a real one) written and flushed, and memory read every 0.5 s."""
    with tempfile.TemporaryDirectory() as tmp:
        events = EventWriter(tmp)
        t0 = time.perf_counter()
        next_mem = 0.0
        for step in range(n):
            a = time.perf_counter()
            b = time.perf_counter()
            rec = {
                STEP_NUMBER: step,
                LOSS: 2.3025,
                STEP_TIME_MS: round((b - a) * 1e3, 4),
                DATA_WAIT_MS: round(0.01234, 4),
                SAMPLES_PER_S: round(128 / 0.0044, 2),
                TFLOPS: 0.0123,
                MFU: 0.0456,
            }
            if b >= next_mem:
                next_mem = b + 0.5
                rec.update(sample(torch.device("cpu")))
            events.write(STEP, **rec)
        elapsed = time.perf_counter() - t0
        events.close()
    return elapsed / n * 1e6


@recorded("overhead", "What the workbench's instrumentation costs")
def main(argv=None) -> int:
    overhead()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
