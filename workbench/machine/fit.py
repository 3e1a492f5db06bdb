"""What this machine can run: the one rule that the launch, the stacking planner, the scaling study
and the widgets ask, so a plan never holds a step that the launch would refuse, and the sentence a
study shows for a skipped step is the one the launch would have raised.

    cannot_run(cfg, device)   # None, or why the launch refuses cfg here (one line)
    core_limits(cfg)          # the ranks' threads and loader workers beyond the usable cores
    max_ranks(cfg, device)    # the most ranks a run of cfg can have here

Too many threads or workers for the cores only makes a run slow: the launch refuses it unless
run.oversubscribe=true, and so does this rule.
"""

from __future__ import annotations

import shutil

import torch

from . import allocator, cpu
from .capability import unsupported_reason
from .threads import threads_for


def device_refusal(cfg, device: torch.device) -> str | None:
    """Why the device cannot do what the config asks (precision, TF32, channels_last, fused)."""
    checks = [
        ("precision.dtype", cfg.precision.dtype, cfg.precision.dtype != "fp32"),
        ("precision.tf32", "tf32", cfg.precision.tf32),
        ("precision.channels_last", "channels_last", cfg.precision.channels_last),
        ("optim.impl", "fused_optimizer", cfg.optim.impl == "fused"),
    ]
    for field, option, asked in checks:
        reason = unsupported_reason(cfg, device, option) if asked else None
        if reason:
            value = {"precision.dtype": option, "optim.impl": "fused"}.get(field, True)
            return f"{field} cannot be {value!r} on {device.type}: {reason}"
    return None


def core_limits(cfg) -> list[str]:
    """The ranks' busy threads and the loader processes beyond this node's usable cores."""
    d, cores = cfg.distributed, cpu.usable_cores()
    out = []
    threads = threads_for(cfg)
    if d.nproc * threads > cores:
        out.append(
            f"distributed.nproc={d.nproc} rank(s) x {threads} thread(s) (run.threads) = "
            f"{d.nproc * threads} busy threads on {cores} usable core(s) of this machine: they "
            f"would take turns and run slower than {cores} would; use distributed.nproc x "
            f"run.threads <= {cores}"
        )
    if d.nproc * cfg.loader.num_workers > cores:
        out.append(
            f"loader.num_workers={cfg.loader.num_workers} x {d.nproc} rank(s) = "
            f"{d.nproc * cfg.loader.num_workers} loader processes on {cores} usable core(s): "
            f"more workers than cores only take turns; use loader.num_workers <= "
            f"{max(1, cores // d.nproc)}"
        )
    return out


def oversubscribed(text: str) -> str:
    """The refusal of a run that would only be slow, with the way to run it anyway."""
    return f"{text}; set run.oversubscribe=true (workbench run --oversubscribe) to run it anyway"


def max_ranks(cfg, device: torch.device) -> int:
    """Ranks a run of cfg can have on this node: one per GPU, or one per usable core (the rank
    slider's end; threads then shrink to share the cores)."""
    if device.type == "cuda":
        return max(1, torch.cuda.device_count())
    return cpu.usable_cores()


def backend_for(cfg, device: torch.device) -> str:
    """The process-group backend: the configured one, or nccl on GPUs and gloo on CPUs."""
    if cfg.distributed.backend != "auto":
        return cfg.distributed.backend
    return "nccl" if device.type == "cuda" else "gloo"


def cannot_run(cfg, device: torch.device) -> str | None:
    """Why the launch would refuse cfg on this machine before building anything, or None. The
    model, the data, memory and disk are checked at launch with the model built (launch.py)."""
    reason = device_refusal(cfg, device)
    if reason:
        return reason
    reason = allocator.refusal(cfg.run.allocator)
    if reason:
        return reason
    if cfg.compile.enabled and device.type == "cpu" and not (shutil.which("c++") or shutil.which("g++")):
        return "compile.enabled needs a C++ compiler (c++ or g++) on the CPU, none found on PATH"
    if backend_for(cfg, device) == "nccl":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus == 0:
            return "distributed.backend 'nccl' needs CUDA GPUs, found none; use 'gloo' (or 'auto') on a CPU"
        if cfg.distributed.nproc > gpus:
            return (
                f"distributed.nproc must be <= {gpus} (the GPUs on this node) with backend nccl, "
                f"got {cfg.distributed.nproc}; use fewer processes or backend 'gloo'"
            )
    limits = core_limits(cfg)
    if limits and not cfg.run.oversubscribe:
        return oversubscribed(limits[0])
    return None


def max_loader_workers(cfg) -> int:
    """Loader workers each rank of cfg can have here without the launch refusing them."""
    return cpu.usable_cores() // cfg.distributed.nproc
