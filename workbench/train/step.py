"""One training step, the same function in the workbench's trainer and in an exported `train.py`
(which copies this file's functions as source, so the two loops cannot drift apart).

    loss, samples, wait_s = train_step(model, step_model, batches, opt, scaler, amp, lossf, device)
"""
from __future__ import annotations

import time
from contextlib import nullcontext

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


def train_step(model, step_model, batches, opt, scaler, amp, lossf, device, *, accum=1,
               world_size=1, channels_last=False, grad_clip=None, phase=no_phase):
    """Forward and backward over `accum` micro-batches, then one optimizer step.

    `model` is the (DDP-wrapped) module, `step_model` what runs forward (compiled or the same).
    Gradients are all-reduced once per step, on the last micro-batch. Returns the step's loss,
    its sample count and the seconds spent waiting for batches; `loss.item()` is the step's one
    device sync. `phase(name)` is a context around each part of the step ("data", "copy",
    "forward", "backward", "optimizer"): nothing by default, the profiler's ranges when profiled."""
    wait, samples = 0.0, 0
    for micro in range(accum):
        tw = time.perf_counter()
        with phase("data"):
            x, y = next(batches)
        with phase("copy"):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            if channels_last and x.dim() == 4:
                x = x.contiguous(memory_format=torch.channels_last)
        wait += time.perf_counter() - tw
        samples += len(x)
        sync = nullcontext() if micro == accum - 1 or world_size == 1 else model.no_sync()
        with sync:
            with phase("forward"), amp:
                loss = lossf(step_model(x), y) / accum
            with phase("backward"):
                scaler.scale(loss).backward()
    with phase("optimizer"):
        if grad_clip is not None:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    return loss.item() * accum, samples, wait


# optim.impl -> the optimizer's keyword: "auto" leaves torch's own choice
OPTIMIZER_IMPLS = {"auto": {}, "for-loop": {"foreach": False}, "foreach": {"foreach": True},
                   "fused": {"fused": True}}


def make_optimizer(cfg, model):
    o = cfg.optim
    impl = OPTIMIZER_IMPLS[o.impl]
    if o.name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=o.lr, weight_decay=o.weight_decay, **impl)
    return torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay,
                           **impl)
