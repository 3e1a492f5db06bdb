"""The instrumented training loop every run uses, one process per rank.

Per step it costs two perf_counter reads, the `loss.item()` any loop makes, and one short JSON line;
memory is read on a timer (run.mem_every_s), never per step.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from . import memory
from .config import RunConfig
from .data import build_data, make_loader
from .events import EventWriter
from .hardware.mfu import MfuMeter
from .loopback import process_group_store
from .models import build_model, loss_fn
from .precision import apply_backend_flags, autocast, check_supported, grad_scaler, resolve_device


@dataclass
class RankEnv:
    """What torchrun tells a worker through its environment (defaults for a plain process)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    attempt: int = 0  # torchrun's restart count

    @classmethod
    def from_environ(cls, environ=os.environ) -> "RankEnv":
        get = lambda k, d: int(environ.get(k, d))  # noqa: E731
        return cls(get("RANK", 0), get("LOCAL_RANK", 0), get("WORLD_SIZE", 1),
                   get("TORCHELASTIC_RESTART_COUNT", 0))


def pick_device(cfg: RunConfig, env: RankEnv) -> torch.device:
    device = resolve_device(cfg.run.device)
    if device.type == "cuda":
        device = torch.device("cuda", env.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    return device


def backend_for(cfg: RunConfig, device: torch.device) -> str:
    if cfg.distributed.backend != "auto":
        return cfg.distributed.backend
    return "nccl" if device.type == "cuda" else "gloo"


def _batches(loader):
    """Cycle through epochs forever, telling a DistributedSampler which epoch it is."""
    epoch = 0
    while True:
        sampler = getattr(loader.sampler, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    model = getattr(model, "_orig_mod", model)  # torch.compile
    return model.module if isinstance(model, DDP) else model


def evaluate(model, loader, cfg, device, task, max_batches: int) -> dict:
    """Mean loss and accuracy (per token for a language model) over the held-out split."""
    model.eval()
    lossf = loss_fn(task)
    total_loss = correct = count = batches = 0
    with torch.no_grad(), autocast(cfg, device):
        for x, y in loader:
            if batches >= max_batches:
                break
            x, y = x.to(device), y.to(device)
            logits = model(x)
            total_loss += lossf(logits, y).float().item() * y.numel()
            correct += (logits.argmax(-1) == y).sum().item()
            count += y.numel()
            batches += 1
    model.train()
    if not count:
        return {}
    return {"eval_loss": total_loss / count, "eval_accuracy": correct / count}


def train(cfg: RunConfig, events: EventWriter, env: RankEnv, run_dir) -> dict:
    """Train per the config, writing events as it goes; returns the summary figures."""
    t_launch = time.time()
    events.write("init", torch=torch.__version__, precision=cfg.precision.dtype,
                 threads=torch.get_num_threads())
    torch.manual_seed(cfg.run.seed)
    device = pick_device(cfg, env)
    check_supported(cfg, device)
    apply_backend_flags(cfg, device)
    t_pg = time.time()
    if env.world_size > 1 and not dist.is_initialized():
        store = process_group_store(env.rank, env.world_size, cfg.distributed.timeout_s)
        where = {"store": store, "rank": env.rank, "world_size": env.world_size} if store else {}
        dist.init_process_group(backend_for(cfg, device),
                                timeout=timedelta(seconds=cfg.distributed.timeout_s), **where)
    init_pg_s = round(time.time() - t_pg, 3)  # the process group's rendezvous

    data = build_data(cfg)
    model = build_model(cfg, data).to(device)
    if cfg.precision.channels_last:
        model = model.to(memory_format=torch.channels_last)
    n_params = sum(p.numel() for p in model.parameters())
    mfu = MfuMeter.for_run(cfg, model, data, device)  # FLOPs per step, counted once, no trace left
    if env.world_size > 1:
        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    step_model = torch.compile(model, mode=cfg.compile.mode) if cfg.compile.enabled else model

    o = cfg.optim
    if o.name == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=o.lr, weight_decay=o.weight_decay)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum,
                              weight_decay=o.weight_decay)
    scaler = grad_scaler(cfg, device)
    amp = autocast(cfg, device)
    lossf = loss_fn(data.task)
    loader = make_loader(data.train, cfg, train=True, rank=env.rank, world_size=env.world_size,
                         seed=cfg.run.seed)
    batches = _batches(loader)
    accum = o.grad_accum_steps
    fp16 = cfg.precision.dtype == "fp16"
    channels_last = cfg.precision.channels_last
    events.write("ready", device=str(device), params=n_params, task=data.task, train_samples=len(data.train),
                 setup_s=round(time.time() - t_launch, 3), init_pg_s=init_pg_s, **memory.sample(device))

    step_times, waits, losses = [], [], []
    skipped = nonfinite = 0
    next_mem = 0.0
    first_step_s = None
    for step in range(1, cfg.run.steps + 1):
        t0 = time.perf_counter()
        wait = 0.0
        samples = 0
        for micro in range(accum):
            tw = time.perf_counter()
            x, y = next(batches)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            if channels_last and x.dim() == 4:
                x = x.contiguous(memory_format=torch.channels_last)
            wait += time.perf_counter() - tw
            samples += len(x)
            last_micro = micro == accum - 1
            sync = nullcontext() if last_micro or env.world_size == 1 else model.no_sync()
            with sync:
                with amp:
                    loss = lossf(step_model(x), y) / accum
                scaler.scale(loss).backward()
        if o.grad_clip is not None:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), o.grad_clip)
        scale_before = scaler.get_scale() if fp16 else 1.0
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        loss_v = loss.item() * accum  # the one device sync per step
        dt = time.perf_counter() - t0

        rec = {"step": step, "loss": loss_v, "step_time_ms": round(dt * 1e3, 4),
               "data_wait_ms": round(wait * 1e3, 4), "samples_per_s": round(samples / dt, 2),
               **mfu.step(dt)}
        if not math.isfinite(loss_v):
            nonfinite += 1
            rec["nonfinite_losses"] = nonfinite
        if fp16:
            scale = scaler.get_scale()
            skipped += scale < scale_before
            rec.update(grad_scale=scale, skipped_steps=skipped)
        now = time.perf_counter()
        if now >= next_mem:
            next_mem = now + cfg.run.mem_every_s
            rec.update(memory.sample(device))
        events.write("step", **rec)
        if first_step_s is None:
            first_step_s = time.time() - t_launch
        step_times.append(dt)
        waits.append(wait)
        losses.append(loss_v)

    wall_s = time.time() - t_launch
    summary = {"steps": cfg.run.steps, "params": n_params, "world_size": env.world_size,
               "device": str(device), "precision": cfg.precision.dtype,
               "final_loss": losses[-1], "time_to_first_step_s": round(first_step_s, 3),
               "wall_s": round(wall_s, 3), "nonfinite_losses": nonfinite}
    summary.update(step_stats(step_times, waits, cfg.loader.batch_size * accum, env.world_size))
    summary.update(mfu.summary(summary["step_time_ms_median"]))
    if fp16:
        summary.update(skipped_steps=skipped, grad_scale=scaler.get_scale())
    if cfg.run.eval_batches:
        test_loader = make_loader(data.test, cfg, train=False)
        summary.update(evaluate(_unwrap(model), test_loader, cfg, device, data.task,
                                cfg.run.eval_batches))
    summary["param_sum"] = param_sum(_unwrap(model))  # equal on every rank when DDP kept them in sync
    mem = memory.sample(device)
    summary.update({k: v for k, v in mem.items() if k != "mem_allocated_gib"})
    if cfg.run.save_weights and env.rank == 0:
        state = {k: v.detach().cpu() for k, v in _unwrap(model).state_dict().items()}
        torch.save(state, run_dir / "model.pt")
    if env.world_size > 1 and dist.is_initialized():
        dist.destroy_process_group()
    return summary


def param_sum(model: torch.nn.Module) -> float:
    with torch.no_grad():
        return sum(p.detach().double().sum().item() for p in model.parameters())


def step_stats(step_times: list[float], waits: list[float], batch: int, world_size: int) -> dict:
    """Medians and spread after warm-up (the first steps pay for allocation and lazy init)."""
    skip = min(len(step_times) // 5, 10)
    times = step_times[skip:] or step_times
    wait = waits[skip:] or waits
    med = statistics.median(times)
    q = statistics.quantiles(times, n=10) if len(times) >= 2 else [med] * 9
    return {"step_time_ms_median": round(med * 1e3, 4), "step_time_ms_p10": round(q[0] * 1e3, 4),
            "step_time_ms_p90": round(q[-1] * 1e3, 4),
            "samples_per_s": round(batch * world_size / med, 2),
            "data_wait_frac": round(sum(wait) / sum(times), 4)}
