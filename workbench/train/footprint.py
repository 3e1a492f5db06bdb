"""Where a training step's memory goes, counted from the tensors themselves: parameters, gradients,
optimizer state, and the activations autograd saves for backward, per module; on a GPU also the
allocator's figures and NVML's for the whole device.

    parameter_bytes(model); gradient_bytes(model); optimizer_state_bytes(opt)
    saved_activations(model, x, y, lossf, amp, checkpointed=["blocks.layers.0"])

Every count is of distinct storages, so tied weights and a tensor saved by two ops count once.
Activations are caught with saved-tensor hooks during one forward pass (module hooks say which
module was running); a checkpointed module saves nothing inside, but the inputs it keeps for its
recompute are counted, under its name.
"""
from __future__ import annotations

import resource
from contextlib import nullcontext

import torch

from ..machine.gpu import GIB
from ..machine.monitor import NvmlReader
from .memory import rss_gib

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


def saved_activations(model: torch.nn.Module, x, y, lossf, amp=None, checkpointed=(),
                      backward: bool = False) -> dict:
    """Bytes autograd keeps for backward after one forward pass on (x, y): the total and per module
    (the innermost module running when each tensor was saved), with what checkpointed modules keep
    for their recompute. Runs no backward unless asked (the pre-launch check runs one, to find a
    model whose backward fails); the caller restores RNG and buffers (flops.no_trace)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, tuple[int, str]] = {}  # storage -> (bytes, module)
    stack: list[str] = []
    checkpointed = set(checkpointed)

    def note(t: torch.Tensor, where: str) -> None:
        s = t.untyped_storage()
        if s.data_ptr() not in params and s.data_ptr() not in saved and s.nbytes():
            saved[s.data_ptr()] = (s.nbytes(), where)

    def pack(t):
        if isinstance(t, torch.Tensor):
            note(t, stack[-1] if stack else OUTSIDE)
        return t

    def enter(name):
        def hook(module, args, kwargs):
            stack.append(name)
            if name in checkpointed:  # what the recompute starts from stays alive until backward
                for t in _tensors((args, kwargs)):
                    note(t, name)
        return hook

    def leave(module, args, output):
        stack.pop()

    handles = []
    for name, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(enter(name or "(model)"), with_kwargs=True))
        handles.append(module.register_forward_hook(leave))
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
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
    return {"total": sum(per_module.values()), "per_module": per_module, "kept_for_recompute": kept,
            "batch_size": len(x)}


def device_memory(device: torch.device, reader: NvmlReader | None = None) -> dict:
    """This process's memory now and at its peak: on a GPU the caching allocator's allocated and
    reserved bytes (and their peaks since the last reset) and NVML's used bytes for the whole
    device (other processes and the CUDA context included); on a CPU the resident set."""
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    out = {"rss_bytes": int(rss_gib() * GIB), "peak_rss_bytes": peak_rss}
    if device.type != "cuda":
        return out
    out.update(allocated_bytes=torch.cuda.memory_allocated(device),
               reserved_bytes=torch.cuda.memory_reserved(device),
               peak_allocated_bytes=torch.cuda.max_memory_allocated(device),
               peak_reserved_bytes=torch.cuda.max_memory_reserved(device))
    reader = reader if reader is not None else NvmlReader()
    index = device.index if device.index is not None else torch.cuda.current_device()
    gpus = {g["index"]: g for g in reader.sample()}
    if index in gpus:
        out["nvml_used_bytes"] = int(gpus[index]["mem_used_gib"] * GIB)
        out["nvml_total_bytes"] = int(gpus[index]["mem_total_gib"] * GIB)
    else:
        out["nvml_note"] = reader.note or f"NVML has no device {index}"
    return out
