"""The instrumented training loop every run uses, one process per rank, in three parts: `setup`
(device, process group, data, model, optimizer), `run_steps` (the timed loop, one event a step)
and `finish` (summary figures, evaluation, saved weights).

Per step it costs two perf_counter reads, the `loss.item()` any loop makes, and one short JSON line;
memory is read on a timer (run.mem_every_s), never per step.
"""
from __future__ import annotations

import io
import math
import statistics
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ..config import RunConfig
from ..disk import write_atomic
from ..events import EventWriter
from ..machine.contention import ContentionMeter
from . import memory
from .data import DataBundle, build_data, make_loader
from .mfu import MfuMeter
from .models import build_model, loss_fn
from .precision import apply_backend_flags, autocast, check_supported, grad_scaler
from .rank import RankEnv, join_group, pick_device, threads_for, tree_root_pid, unwrap
from .step import cycle_batches, make_optimizer, train_step

WEIGHTS = "model.pt"


@dataclass
class Setup:
    """Everything the loop needs, built once before the first step."""

    device: torch.device
    data: DataBundle
    model: torch.nn.Module  # DDP-wrapped under several ranks
    step_model: torch.nn.Module  # what runs forward: compiled, or the model itself
    opt: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    amp: object
    lossf: object
    batches: object
    mfu: MfuMeter
    params: int
    t_launch: float


@dataclass
class Steps:
    """What the timed loop measured."""

    times: list = field(default_factory=list)
    waits: list = field(default_factory=list)
    losses: list = field(default_factory=list)
    skipped: int = 0
    nonfinite: int = 0
    first_step_s: float | None = None
    contention: dict | None = None  # what other programs did during the timed steps (rank 0)


def warmup_steps(steps: int) -> int:
    """Steps left out of every figure: the first ones pay for allocation and lazy init."""
    return min(steps // 5, 10)


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


def setup(cfg: RunConfig, events: EventWriter, env: RankEnv) -> Setup:
    """Device, process group, data, model, FLOP count, DDP, compile, optimizer and loader, in the
    order the exported script repeats (so the same seed gives the same random draws)."""
    t_launch = time.time()
    torch.set_num_threads(threads_for(cfg))  # fixed and recorded: every figure says its threads
    events.write("init", torch=torch.__version__, precision=cfg.precision.dtype,
                 threads=torch.get_num_threads())
    torch.manual_seed(cfg.run.seed)
    device = pick_device(cfg, env)
    check_supported(cfg, device)
    apply_backend_flags(cfg, device)
    t_pg = time.time()
    join_group(cfg, env, device)
    init_pg_s = round(time.time() - t_pg, 3)  # the process group's rendezvous

    data = build_data(cfg)
    model = build_model(cfg, data).to(device)
    if cfg.precision.channels_last:
        model = model.to(memory_format=torch.channels_last)
    params = sum(p.numel() for p in model.parameters())
    mfu = MfuMeter.for_run(cfg, model, data, device)  # FLOPs per step, counted once, no trace left
    if env.world_size > 1:
        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    step_model = torch.compile(model, mode=cfg.compile.mode) if cfg.compile.enabled else model
    opt = make_optimizer(cfg, model)
    loader = make_loader(data.train, cfg, train=True, rank=env.rank, world_size=env.world_size,
                         seed=cfg.run.seed)
    s = Setup(device, data, model, step_model, opt, grad_scaler(cfg, device), autocast(cfg, device),
              loss_fn(data.task), cycle_batches(loader), mfu, params, t_launch)
    events.write("ready", device=str(device), params=params, task=data.task,
                 train_samples=len(data.train), setup_s=round(time.time() - t_launch, 3),
                 init_pg_s=init_pg_s, **memory.sample(device))
    return s


def run_steps(cfg: RunConfig, s: Setup, events: EventWriter, env: RankEnv) -> Steps:
    """The timed loop: one `step` record per optimizer step."""
    fp16 = cfg.precision.dtype == "fp16"
    out = Steps()
    next_mem = 0.0
    warmup = warmup_steps(cfg.run.steps)
    meter = ContentionMeter(tree_root_pid()) if env.rank == 0 else None
    for step in range(1, cfg.run.steps + 1):
        if meter is not None and step == warmup + 1:
            meter.restart()  # the figures leave the warm-up out, so does their noise guard
        t0 = time.perf_counter()
        scale_before = s.scaler.get_scale() if fp16 else 1.0
        loss_v, samples, wait = train_step(
            s.model, s.step_model, s.batches, s.opt, s.scaler, s.amp, s.lossf, s.device,
            accum=cfg.optim.grad_accum_steps, world_size=env.world_size,
            channels_last=cfg.precision.channels_last, grad_clip=cfg.optim.grad_clip)
        dt = time.perf_counter() - t0
        rec = {"step": step, "loss": loss_v, "step_time_ms": round(dt * 1e3, 4),
               "data_wait_ms": round(wait * 1e3, 4), "samples_per_s": round(samples / dt, 2),
               **s.mfu.step(dt)}
        if not math.isfinite(loss_v):
            out.nonfinite += 1
            rec["nonfinite_losses"] = out.nonfinite
        if fp16:
            scale = s.scaler.get_scale()
            out.skipped += scale < scale_before
            rec.update(grad_scale=scale, skipped_steps=out.skipped)
        now = time.perf_counter()
        if now >= next_mem:
            next_mem = now + cfg.run.mem_every_s
            rec.update(memory.sample(s.device))
        events.write("step", **rec)
        if out.first_step_s is None:
            out.first_step_s = time.time() - s.t_launch
        out.times.append(dt)
        out.waits.append(wait)
        out.losses.append(loss_v)
    if meter is not None:
        out.contention = meter.read()
    return out


def finish(cfg: RunConfig, s: Setup, st: Steps, env: RankEnv, run_dir) -> dict:
    """The summary figures; evaluation on the held-out split; rank 0 saves the weights."""
    accum = cfg.optim.grad_accum_steps
    summary = {"steps": cfg.run.steps, "params": s.params, "world_size": env.world_size,
               "device": str(s.device), "precision": cfg.precision.dtype,
               "final_loss": st.losses[-1], "time_to_first_step_s": round(st.first_step_s, 3),
               "wall_s": round(time.time() - s.t_launch, 3), "nonfinite_losses": st.nonfinite,
               "threads": torch.get_num_threads()}
    if st.contention is not None:
        summary["contention"] = st.contention
    summary.update(step_stats(st.times, st.waits, cfg.loader.batch_size * accum, env.world_size))
    summary.update(s.mfu.summary(summary["step_time_ms_median"]))
    if cfg.precision.dtype == "fp16":
        summary.update(skipped_steps=st.skipped, grad_scale=s.scaler.get_scale())
    plain = unwrap(s.model)
    if cfg.run.eval_batches:
        test_loader = make_loader(s.data.test, cfg, train=False)
        summary.update(evaluate(plain, test_loader, cfg, s.device, s.data.task, cfg.run.eval_batches))
    summary["param_sum"] = param_sum(plain)  # equal on every rank when DDP kept them in sync
    mem = memory.sample(s.device)
    summary.update({k: v for k, v in mem.items() if k != "mem_allocated_gib"})
    if cfg.run.save_weights and env.rank == 0:
        state = {k: v.detach().cpu() for k, v in plain.state_dict().items()}
        buffer = io.BytesIO()  # serialised first, so a full disk is an OSError, not a torn file
        torch.save(state, buffer)
        write_atomic(run_dir / WEIGHTS, buffer.getvalue())
    if env.world_size > 1 and dist.is_initialized():
        dist.destroy_process_group()
    return summary


def train(cfg: RunConfig, events: EventWriter, env: RankEnv, run_dir) -> dict:
    """Train per the config, writing events as it goes; returns the summary figures."""
    s = setup(cfg, events, env)
    return finish(cfg, s, run_steps(cfg, s, events, env), env, run_dir)


def param_sum(model: torch.nn.Module) -> float:
    with torch.no_grad():
        return sum(p.detach().double().sum().item() for p in model.parameters())


def step_stats(step_times: list[float], waits: list[float], batch: int, world_size: int) -> dict:
    """Medians and spread after warm-up (the first steps pay for allocation and lazy init)."""
    skip = warmup_steps(len(step_times))
    times = step_times[skip:] or step_times
    wait = waits[skip:] or waits
    med = statistics.median(times)
    q = statistics.quantiles(times, n=10) if len(times) >= 2 else [med] * 9
    return {"step_time_ms_median": round(med * 1e3, 4), "step_time_ms_p10": round(q[0] * 1e3, 4),
            "step_time_ms_p90": round(q[-1] * 1e3, 4),
            "samples_per_s": round(batch * world_size / med, 2),
            "data_wait_frac": round(sum(wait) / sum(times), 4)}
