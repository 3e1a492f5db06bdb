"""What autograd saves for backward while a forward pass runs, counted by distinct storage: the
one count behind the activation figures (the footprint per module, a step's cost, the memory a
rank holds mid-step)."""

from __future__ import annotations

from contextlib import contextmanager

import torch


def storage_of(p: torch.Tensor):
    return (p.to_local() if hasattr(p, "to_local") else p).untyped_storage()  # an FSDP shard's own


@contextmanager
def saved_for_backward(model: torch.nn.Module, where=lambda: None):
    """While active, every storage autograd saves for backward, once: {storage: (bytes, where())}.
    The model's parameters are read as each tensor is saved, since FSDP swaps in the whole
    parameters it gathers for a block's forward and frees them after."""
    saved: dict[int, tuple[int, str | None]] = {}

    def pack(t):
        if isinstance(t, torch.Tensor):
            s = t.untyped_storage()
            if (
                s.nbytes()
                and s.data_ptr() not in saved
                and s.data_ptr() not in {storage_of(p).data_ptr() for p in model.parameters()}
            ):
                saved[s.data_ptr()] = (s.nbytes(), where())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield saved
