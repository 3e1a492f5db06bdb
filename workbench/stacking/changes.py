"""The catalog of changes a stacking study can stack: each a name, the dotted settings it sets, and
what it is for. A person's own step is a (label, {dotted: value}) pair.

    from workbench.stacking.changes import CHANGES, as_change
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..config import ConfigError

# The tables' column that names each step of a study (a change stacked on the last): a stacking
# step, not a training step, though a record's step number is spelled the same.
STACK_STEP = "step"


@dataclass(frozen=True)
class Change:
    """One step of the study: a name, the dotted settings it sets, and what it is for."""

    key: str
    label: str
    settings: dict = field(default_factory=dict)
    why: str = ""


CHANGES = {c.key: c for c in [
    Change("bf16", "+ bf16", {"precision.dtype": "bf16"},
           "bf16 autocast: matrix work in bfloat16 (AMX on recent x86 CPUs, tensor cores on GPUs)"),
    Change("fp16", "+ fp16", {"precision.dtype": "fp16"}, "fp16 autocast with a gradient scaler"),
    Change("tf32", "+ TF32", {"precision.tf32": True}, "TF32 matmuls on Ampere or newer GPUs"),
    Change("channels_last", "+ channels_last", {"precision.channels_last": True},
           "NHWC memory layout for convolutions"),
    Change("compile", "+ compile", {"compile.enabled": True}, "torch.compile (inductor)"),
    Change("workers", "+ 2 loader workers", {"loader.num_workers": 2, "loader.persistent_workers": True},
           "batches prepared in 2 worker processes, kept between epochs"),
    Change("pin_memory", "+ pinned memory", {"loader.pin_memory": True},
           "page-locked host batches for faster, asynchronous copies to the GPU"),
    Change("ddp", "+ 2 DDP ranks", {"distributed.nproc": 2},
           "two ranks with torchrun, gradients all-reduced"),
]}


def as_change(item) -> Change:
    """A Change, a key of CHANGES, or (label, {dotted: value}) for your own step."""
    if isinstance(item, Change):
        return item
    if isinstance(item, str):
        if item not in CHANGES:
            raise ConfigError(f"stacking change {item!r} is unknown; use one of {', '.join(CHANGES)} "
                              "or a (label, {'dotted.field': value}) pair")
        return CHANGES[item]
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], dict):
        return Change(str(item[0]), str(item[0]), dict(item[1]))
    raise ConfigError(f"stacking change must be a name or a (label, settings) pair, got {item!r}")
