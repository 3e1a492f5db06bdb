"""The settings the tune tries, each with the kind the search orders by and whether it changes
the numbers a run computes (then its loss is checked too).

    for cand, reason in reachable(baseline): ...   # reason: why it is not tried here, or None

The largest batch that fits a memory budget and activation checkpointing depend on the model's
measured memory: workbench.tune.memory plans them. Not tried, and said so in every report
(NOT_TRIED): threads, which every run already chooses from what other programs leave free
(workbench.machine.threads).
"""
from __future__ import annotations

from ..config import ConfigError, RunConfig
from ..machine.capability import resolve_device
from ..machine.fit import cannot_run
from ..stacking.changes import CHANGES
from .search import Candidate

CATALOG = [
    Candidate("bf16", {"precision.dtype": "bf16"}, "precision", True, CHANGES["bf16"].why),
    Candidate("fp16", {"precision.dtype": "fp16"}, "precision", True, CHANGES["fp16"].why),
    Candidate("compile", {"compile.enabled": True}, "compile", True,
              "torch.compile fuses the step's operations into generated kernels; compiled once a run"),
    Candidate("channels_last", {"precision.channels_last": True}, "layout", False,
              CHANGES["channels_last"].why),
    Candidate("workers", CHANGES["workers"].settings, "loader", False, CHANGES["workers"].why),
    Candidate("foreach", {"optim.impl": "foreach"}, "optimizer", False,
              "the optimizer updates all parameters in a few batched kernels"),
    Candidate("fused", {"optim.impl": "fused"}, "optimizer", False,
              "the optimizer's update as one fused kernel"),
    Candidate("ddp", {"distributed.nproc": 2}, "ranks", False, CHANGES["ddp"].why),
    Candidate("fsdp", {"distributed.nproc": 2, "distributed.strategy": "fsdp"}, "ranks", False,
              "two ranks with FSDP2: each holds a shard of the parameters and optimizer state"),
]
FLAT_MODELS = ("mlp", "transformer")  # built-in models without image tensors (yours are tried)
NOT_TRIED = {"threads": "every run chooses them from what other programs leave free"}


def reachable(baseline: RunConfig, image_weights: bool | None = None) -> list[tuple[Candidate, str | None]]:
    """Every candidate with why it is not tried on this machine and model (None: it is tried).
    Whether it still runs stacked on the settings kept before it is asked again in the search.
    `image_weights`: whether the model has 4-D weights (the pre-launch check says; None: unknown)."""
    device = resolve_device(baseline.run.device)
    out = []
    for cand in CATALOG:
        try:
            after = baseline.replace(**cand.settings)
        except ConfigError as e:  # a setting the baseline's other settings exclude (FSDP: compile)
            out.append((cand, str(e)))
            continue
        if after == baseline:
            reason = "already part of the baseline"
        elif cand.kind == "layout" and (baseline.model.name in FLAT_MODELS or image_weights is False):
            reason = "channels_last changes only 4-D image tensors; this model has none"
        else:
            reason = cannot_run(after, device)
        out.append((cand, reason))
    return out
