"""The settings the tune tries, each with the kind the search orders by and whether it changes
the numbers a run computes (then its loss is checked too).

    for cand, reason in reachable(baseline): ...   # reason: why it is not tried here, or None

The largest batch that fits a memory budget and activation checkpointing depend on the model's
measured memory: workbench.tune.memory_candidates plans them. Not tried, and said so in every report
(NOT_TRIED): threads, which every run already chooses from what other programs leave free
(workbench.machine.threads).
"""

from __future__ import annotations

from ..config import RunConfig
from ..machine.capability import resolve_device
from ..trials.changes import CHANGES, Change

TUNED = ("bf16", "fp16", "compile", "channels_last", "workers", "foreach", "fused", "ddp", "fsdp")
CATALOG = [CHANGES[key] for key in TUNED]
NOT_TRIED = {"threads": "every run chooses them from what other programs leave free"}


def reachable(baseline: RunConfig, image_weights: bool | None = None) -> list[tuple[Change, str | None]]:
    """Every candidate with why it is not tried on this machine and model (None: it is tried).
    Whether it still runs stacked on the settings kept before it is asked again in the search.
    `image_weights`: whether the model has 4-D weights (the pre-launch check says; None: unknown)."""
    device = resolve_device(baseline.run.device)
    return [(cand, cand.applied(baseline, device, image_weights)[1]) for cand in CATALOG]
