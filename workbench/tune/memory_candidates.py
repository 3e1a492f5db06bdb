"""The tune's memory candidates: the largest batch that fits a memory budget, and activation
checkpointing where it lets a larger batch fit (or the baseline fit at all), from the pre-launch
check's per-rank prediction (workbench.distributed.limits: exact parameter, gradient and optimizer
bytes, plus the activations per sample measured on a few samples, with checkpointing as configured).

    plan = plan_memory(baseline, budget_gib=None)   # None: what the pre-launch check says is available
    plan.options       # [(Change, why it is not tried or None)]: "batch", "checkpointing"
    plan.note          # the budget, where it came from, and what the baseline needs

Only powers of two are tried, up to the samples each rank's share of the data holds. The blocks to
checkpoint are the layers of the model's first nn.ModuleList, the rule FSDP's blocks follow
(workbench.train.sharding.layer_blocks); a model without one has nothing worth checkpointing.
Checkpointing trades time for memory, so it is tried only when the budget binds: needed first when
the baseline does not fit, or together with the larger batch it lets fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..config import ConfigError, RunConfig
from ..distributed.limits import available_per_rank, per_rank_gib
from ..machine.capability import resolve_device
from ..trials.changes import Change

BATCH_WHY = (
    "a larger batch keeps the cores busier per step; compared by samples/s, and its loss "
    "against the samples seen"
)
CHECKPOINT_WHY = "trades time for memory: each block's forward runs again in backward"
# the two as the report names them before their settings are planned (both change the numbers)
BATCH = Change("batch", {}, "batch", True, BATCH_WHY)
CHECKPOINTING = Change("checkpointing", {}, "memory", True, CHECKPOINT_WHY)


@dataclass
class MemoryPlan:
    budget_gib: float | None
    note: str
    options: list  # [(Change, reason it is not tried, or None)]


def largest_batch(cfg: RunConfig, need: dict, device_type: str, budget_gib: float) -> int:
    """The largest power-of-two batch per rank whose predicted need fits the budget, no larger than
    each rank's share of the training samples (0: not even one sample fits)."""
    share = need["train_samples"] // cfg.distributed.world_size
    best, b = 0, 1
    while (
        b <= share and per_rank_gib(cfg.replace(**{"loader.batch_size": b}), need, device_type) <= budget_gib
    ):
        best, b = b, 2 * b
    return best


def _gib(cfg: RunConfig, need: dict, device_type: str) -> str:
    return f"{per_rank_gib(cfg, need, device_type):.3g} GiB a rank at batch {cfg.loader.batch_size}"


def plan_memory(
    baseline: RunConfig, budget_gib: float | None = None, precheck: Callable[[RunConfig], dict] | None = None
) -> MemoryPlan:
    """The batch and checkpointing candidates the budget allows (the module). `precheck` builds a
    config's model and data in a child process (the launcher's); a ConfigError when the baseline
    does not fit the budget even with checkpointing."""
    if precheck is None:
        from ..distributed.launch import launcher

        precheck = launcher().precheck
    device = resolve_device(baseline.run.device).type
    if budget_gib is not None and not budget_gib > 0:
        raise ConfigError(f"--memory-budget must be > 0 GiB, got {budget_gib!r}")
    where = "given"
    if budget_gib is None:
        budget_gib, where = available_per_rank(baseline, device)
    need = precheck(baseline)
    unmeasured = need.get("activations_note") or need.get("note")
    if budget_gib is None or "activation_bytes_per_sample" not in need:
        why = (
            f"{where}; give a memory budget (--memory-budget GIB)"
            if budget_gib is None
            else f"the memory a batch needs is not predicted: {unmeasured}"
        )
        return MemoryPlan(budget_gib, f"no memory budget: {why}", [(BATCH, why), (CHECKPOINTING, why)])
    note = (
        f"memory budget {budget_gib:.3g} GiB a rank ({where}); "
        f"the baseline needs {_gib(baseline, need, device)}"
    )
    size = baseline.loader.batch_size
    b0 = largest_batch(baseline, need, device, budget_gib)
    blocks = need.get("layer_blocks") or []
    checkpointed = baseline.replace(**{"train.checkpoint": blocks}) if blocks else None
    need1 = precheck(checkpointed) if blocks else None
    b1 = largest_batch(checkpointed, need1, device, budget_gib) if blocks else 0
    if b0 < size:  # the budget binds: checkpointing is needed, if it helps at all
        if b1 < size:
            with_ckpt = (
                f", {_gib(checkpointed, need1, device)} with activation checkpointing" if blocks else ""
            )
            largest = max(b0, b1)
            use = (
                f"use loader.batch_size <= {largest}{' with train.checkpoint' if b1 > b0 else ''} "
                "or a larger budget"
                if largest
                else "use a larger budget or a smaller model"
            )
            raise ConfigError(
                f"the baseline needs {_gib(baseline, need, device)}{with_ckpt}, over the "
                f"{budget_gib:.3g} GiB memory budget ({where}); {use}"
            )
        needed = Change(
            "checkpointing",
            {"train.checkpoint": blocks},
            "memory",
            True,
            CHECKPOINT_WHY,
            needed=f"the baseline needs {_gib(baseline, need, device)}, "
            f"over the {budget_gib:.3g} GiB budget; with its {len(blocks)} blocks "
            f"checkpointed, {_gib(checkpointed, need1, device)}",
        )
        larger = Change(
            "batch",
            {"train.checkpoint": blocks, "loader.batch_size": b1},
            "batch",
            True,
            f"{BATCH_WHY}; batch {b1} is the largest that fits, checkpointed",
        )
        return MemoryPlan(
            budget_gib,
            note,
            [
                (needed, None),
                (
                    larger,
                    None
                    if b1 > size
                    else f"batch {size} is already the largest power of two that fits, checkpointed",
                ),
            ],
        )
    larger = Change(
        "batch", {"loader.batch_size": b0}, "batch", True, f"{BATCH_WHY}; {b0} is the largest that fits"
    )
    top = f"batch {size} is already the largest power of two that fits the budget and the data"
    options = [(larger, None if b0 > size else top)]
    if not blocks:
        options.append(
            (
                CHECKPOINTING,
                "this model has no blocks to checkpoint (no nn.ModuleList of "
                "layers, the rule FSDP's blocks follow)",
            )
        )
    elif b1 <= max(b0, size):
        options.append(
            (
                CHECKPOINTING,
                f"{CHECKPOINT_WHY}, and the budget does not bind: "
                f"checkpointed, no larger batch fits ({b1} against {max(b0, size)})",
            )
        )
    else:
        options.append(
            (
                Change(
                    "checkpointing",
                    {"train.checkpoint": blocks, "loader.batch_size": b1},
                    "memory",
                    True,
                    f"{CHECKPOINT_WHY}; it lets batch {b1} fit where {b0} is the largest without",
                ),
                None,
            )
        )
    return MemoryPlan(budget_gib, note, options)
