"""One training step, the same function in the workbench's trainer and in an exported `train.py`
(which copies this file's functions as source, so the two loops cannot drift apart).

    parts = StepParts(model, step_model, opt, scaler, amp, lossf, device)
    loss, samples, wait_s = train_step(parts, batches)
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch


def cycle_batches(loader):
    """Cycle through epochs forever, telling a DistributedSampler which epoch it is."""
    epoch = 0
    while True:
        sampler = getattr(loader.sampler, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def no_phase(name):
    return nullcontext()


class StepPart:
    """The part of a step this process's loop is in ('' between steps), read by the heartbeat's
    thread: a rank waiting in a collective (backward, under DDP) is told from the rank it waits
    for (still in forward)."""

    now = ""


def marked(phase):
    """`phase`, noting in StepPart which part of the step runs."""

    @contextmanager
    def part(name):
        StepPart.now = name
        with phase(name):
            yield

    return part


@dataclass(frozen=True)
class StepParts:
    """What every optimizer step runs on, built once before the first step."""

    model: torch.nn.Module  # whose gradients are averaged: DDP-wrapped under several ranks
    step_model: torch.nn.Module  # what runs forward: compiled, or the model itself
    opt: torch.optim.Optimizer
    scaler: torch.amp.GradScaler  # fp16's loss scaling; a disabled scaler passes through
    amp: object  # the autocast context (re-entered every micro-batch), or a nullcontext
    lossf: object  # (output, target) -> the loss tensor
    device: torch.device
    accum: int = 1  # micro-batches per optimizer step (optim.grad_accum_steps)
    world_size: int = 1
    channels_last: bool = False
    grad_clip: float | None = None


def train_step(parts: StepParts, batches, phase=no_phase):
    """Forward and backward over `parts.accum` micro-batches from `batches`, then one optimizer step.

    Gradients are all-reduced once per step, on the last micro-batch. Returns the step's loss,
    its sample count and the seconds spent waiting for batches; `loss.item()` is the step's one
    device sync. `phase(name)` is a context around each part of the step ("data", "copy",
    "forward", "backward", "optimizer"): nothing by default, the profiler's ranges when profiled."""
    p, phase = parts, marked(phase)
    wait, samples = 0.0, 0
    for micro in range(p.accum):
        tw = time.perf_counter()
        with phase("data"):
            x, y = next(batches)
        with phase("copy"):
            x, y = x.to(p.device, non_blocking=True), y.to(p.device, non_blocking=True)
            if p.channels_last and x.dim() == 4:
                x = x.contiguous(memory_format=torch.channels_last)
        wait += time.perf_counter() - tw
        samples += len(x)
        last = micro == p.accum - 1
        with nullcontext() if last or p.world_size == 1 else p.model.no_sync():
            with phase("forward"), p.amp:
                loss = p.lossf(p.step_model(x), y) / p.accum
            with phase("backward"):
                p.scaler.scale(loss).backward()
    with phase("optimizer"):
        if p.grad_clip is not None:
            p.scaler.unscale_(p.opt)
            torch.nn.utils.clip_grad_norm_(p.model.parameters(), p.grad_clip)
        p.scaler.step(p.opt)
        p.scaler.update()
        p.opt.zero_grad(set_to_none=True)
    StepPart.now = ""
    return loss.item() * p.accum, samples, wait


# optim.impl -> the optimizer's keyword: "auto" leaves torch's own choice
OPTIMIZER_IMPLS = {
    "auto": {},
    "for-loop": {"foreach": False},
    "foreach": {"foreach": True},
    "fused": {"fused": True},
}


def make_optimizer(cfg, model):
    o = cfg.optim
    impl = OPTIMIZER_IMPLS[o.impl]
    if o.name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=o.lr, weight_decay=o.weight_decay, **impl)
    return torch.optim.SGD(
        model.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay, **impl
    )
