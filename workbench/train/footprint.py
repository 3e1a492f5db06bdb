"""Where a training step's memory goes, counted from the tensors themselves: parameters, gradients,
optimizer state, and the activations autograd saves for backward, per module; on a GPU also the
allocator's figures and NVML's for the whole device.

    parameter_bytes(model); gradient_bytes(model); optimizer_state_bytes(opt)
    saved_activations(model, x, y, lossf, amp, checkpointed=["blocks.layers.0"])
    batch_activations(model, cfg, data, lossf, amp, device)    # the same, on the config's batch

Every count is of distinct storages, so tied weights and a tensor saved by two ops count once.
Activations are caught with saved-tensor hooks (saved_tensors.py) during one forward pass (module
hooks say which module was running); a checkpointed module saves nothing inside, but the inputs it
keeps for its recompute are counted, under its name. Parameters are left out, FSDP's gathered ones
included: a saved tensor whose storage is one of the model's parameters' as it is saved.
"""

from __future__ import annotations

import resource
from contextlib import nullcontext

import torch

from ..machine.gpu import GIB
from ..machine.monitor import NvmlReader
from .activation_checkpointing import resolve
from .flops import first_batch, no_trace
from .memory_readings import rss_gib
from .saved_tensors import saved_for_backward

OUTSIDE = "(outside any module: the loss)"


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (views and tied weights once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def parameter_bytes(model: torch.nn.Module) -> int:
    return storage_bytes(model.parameters())


def gradient_bytes(model: torch.nn.Module) -> int:
    """The gradients that exist now (after backward, before zero_grad)."""
    return storage_bytes(p.grad for p in model.parameters() if p.grad is not None)


def optimizer_state_bytes(opt: torch.optim.Optimizer) -> int:
    """Every tensor the optimizer keeps per parameter (AdamW: exp_avg, exp_avg_sq and step)."""
    return storage_bytes(v for state in opt.state.values() for v in state.values())


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def saved_activations(
    model: torch.nn.Module, x, y, lossf, amp=None, checkpointed=(), backward: bool = False
) -> dict:
    """Bytes autograd keeps for backward after one forward pass on (x, y): the total and per module
    (the innermost module running when each tensor was saved), with what checkpointed modules keep
    for their recompute. Runs no backward unless asked (the pre-launch check runs one, to find a
    model whose backward fails); the caller restores RNG and buffers (flops.no_trace)."""
    stack: list[str] = []
    checkpointed = set(checkpointed)

    def enter(name):
        def hook(module, args, kwargs):
            stack.append(name)
            if name in checkpointed:  # what the recompute starts from stays alive until backward
                for t in _tensors((args, kwargs)):
                    s = t.untyped_storage()
                    if s.nbytes():
                        saved.setdefault(s.data_ptr(), (s.nbytes(), name))

        return hook

    def leave(module, args, output):
        stack.pop()

    handles = []
    for name, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(enter(name or "(model)"), with_kwargs=True))
        handles.append(module.register_forward_hook(leave))
    try:
        with saved_for_backward(model, lambda: stack[-1] if stack else OUTSIDE) as saved:
            with amp or nullcontext():
                loss = lossf(model(x), y)
    finally:
        for h in handles:
            h.remove()
    if backward:
        loss.backward()
    del loss  # the graph and what it saved go with it
    per_module: dict[str, int] = {}
    for nbytes, where in saved.values():
        per_module[where] = per_module.get(where, 0) + nbytes
    kept = sum(b for b, where in saved.values() if where in checkpointed)
    return {
        "total": sum(per_module.values()),
        "per_module": per_module,
        "kept_for_recompute": kept,
        "batch_size": len(x),
    }


def batch_activations(
    model: torch.nn.Module, cfg, data, lossf, amp, device, batch: int | None = None
) -> dict:
    """saved_activations on the first `batch` samples (loader.batch_size) read straight from the
    data set, in the run's memory format and with its checkpointed modules; the run's RNG, buffers
    and gradients are left as they were."""
    x, y = first_batch(data.train, batch or cfg.loader.batch_size, device)
    if cfg.precision.channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    with no_trace(model):
        return saved_activations(model, x, y, lossf, amp, resolve(model, cfg.train.checkpoint))


def device_memory(device: torch.device, reader: NvmlReader | None = None) -> dict:
    """This process's memory now and at its peak: on a GPU the caching allocator's allocated and
    reserved bytes (and their peaks since the last reset) and NVML's used bytes for the whole
    device (other processes and the CUDA context included); on a CPU the resident set."""
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    out = {"rss_bytes": int(rss_gib() * GIB), "peak_rss_bytes": peak_rss}
    if device.type != "cuda":
        return out
    out.update(
        allocated_bytes=torch.cuda.memory_allocated(device),
        reserved_bytes=torch.cuda.memory_reserved(device),
        peak_allocated_bytes=torch.cuda.max_memory_allocated(device),
        peak_reserved_bytes=torch.cuda.max_memory_reserved(device),
    )
    reader = reader if reader is not None else NvmlReader()
    index = device.index if device.index is not None else torch.cuda.current_device()
    gpus = {g["index"]: g for g in reader.sample()}
    if index in gpus:
        out["nvml_used_bytes"] = int(gpus[index]["mem_used_gib"] * GIB)
        out["nvml_total_bytes"] = int(gpus[index]["mem_total_gib"] * GIB)
    else:
        out["nvml_note"] = reader.note or f"NVML has no device {index}"
    return out
