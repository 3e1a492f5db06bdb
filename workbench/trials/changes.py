"""The one list of changes a person can try on a run, for the stacking study, the tune and their
widgets alike: each a name, the dotted settings it sets, the kind the tune orders it by, whether it
changes the numbers a run computes (then its loss is checked too), what it is for, and when it can
run here (`applied`). A person's own change is a (label, {dotted: value}) pair.

    from workbench.trials.changes import CHANGES, as_change
    after, why_not = CHANGES["bf16"].applied(cfg, device)   # why_not is None when it can run
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import ConfigError, RunConfig

# The tables' column that names each step of a stacking study (a change stacked on the last): a
# stacking step, not a training step, though a record's step number is spelled the same.
STACK_STEP = "step"


@dataclass(frozen=True)
class Change:
    """One change: what it sets, what kind of change it is, whether it changes the numbers, why."""

    key: str
    settings: dict = field(default_factory=dict)
    kind: str = "yours"  # precision, compile, layout, loader, optimizer, ranks, memory, batch
    changes_numbers: bool = False
    why: str = ""
    needed: str = ""  # why the config cannot do without it: kept if its loss holds, whatever its speed
    label: str = ""  # how a table names it as a step ("+ bf16"); "+ key" when not given

    def __post_init__(self):
        if not self.label:
            object.__setattr__(self, "label", f"+ {self.key}")

    def applied(
        self, before: RunConfig, device, image_weights: bool | None = None
    ) -> tuple[RunConfig, str | None]:
        """`before` with this change, and why it cannot run here (then `before` itself): a config
        the change makes invalid, a change already made, one that would do nothing on this device
        or model, or what the launch would refuse, in its words (workbench.machine.fit).
        `image_weights`: whether the model has 4-D weights (the pre-launch check says; None: unknown)."""
        from ..machine.capability import NO_IMAGE_TENSORS  # torch: imported when a change is applied,
        from ..machine.fit import cannot_run  # not when the command line lists the changes

        try:
            after = before.replace(**self.settings)
        except ConfigError as e:  # a setting the others exclude (FSDP: compile)
            return before, f"not a valid config: {e}"
        if after == before:
            return before, "already part of the config it would be added to"
        if self.settings.get("loader.pin_memory") and device.type != "cuda":
            return before, (
                "pin_memory needs a GPU: it speeds host-to-GPU copies, and without one torch ignores it"
            )
        if self.kind == "layout" and image_weights is False:  # your model, as its pre-launch check saw it
            return before, NO_IMAGE_TENSORS
        reason = cannot_run(after, device)
        return (before, reason) if reason else (after, None)


CHANGES = {
    c.key: c
    for c in [
        Change(
            "bf16",
            {"precision.dtype": "bf16"},
            "precision",
            True,
            "bf16 autocast: matrix work in bfloat16 (AMX on recent x86 CPUs, tensor cores on GPUs)",
        ),
        Change(
            "fp16", {"precision.dtype": "fp16"}, "precision", True, "fp16 autocast with a gradient scaler"
        ),
        Change(
            "tf32",
            {"precision.tf32": True},
            "precision",
            True,
            "TF32 matmuls on Ampere or newer GPUs",
            label="+ TF32",
        ),
        Change(
            "compile",
            {"compile.enabled": True},
            "compile",
            True,
            "torch.compile fuses the step's operations into generated kernels; compiled once a run",
        ),
        Change(
            "channels_last",
            {"precision.channels_last": True},
            "layout",
            False,
            "NHWC memory layout for convolutions",
        ),
        Change(
            "workers",
            {"loader.num_workers": 2, "loader.persistent_workers": True},
            "loader",
            False,
            "batches prepared in 2 worker processes, kept between epochs",
            label="+ 2 loader workers",
        ),
        Change(
            "pin_memory",
            {"loader.pin_memory": True},
            "loader",
            False,
            "page-locked host batches for faster, asynchronous copies to the GPU",
            label="+ pinned memory",
        ),
        Change(
            "foreach",
            {"optim.impl": "foreach"},
            "optimizer",
            False,
            "the optimizer updates all parameters in a few batched kernels",
        ),
        Change(
            "fused", {"optim.impl": "fused"}, "optimizer", False, "the optimizer's update as one fused kernel"
        ),
        Change(
            "ddp",
            {"distributed.nproc": 2},
            "ranks",
            False,
            "two ranks with torchrun, gradients all-reduced",
            label="+ 2 DDP ranks",
        ),
        Change(
            "fsdp",
            {"distributed.nproc": 2, "distributed.strategy": "fsdp"},
            "ranks",
            False,
            "two ranks with FSDP2: each holds a shard of the parameters and optimizer state",
            label="+ 2 FSDP ranks",
        ),
    ]
}
STACKED = ("bf16", "fp16", "tf32", "channels_last", "compile", "workers", "pin_memory", "ddp")  # the study's


def as_change(item, what: str = "stacking change") -> Change:
    """A Change, a key of CHANGES, or (label, {dotted: value}) for your own change; `what` names
    the field a wrong one is refused for."""
    if isinstance(item, Change):
        return item
    if isinstance(item, str):
        if item not in CHANGES:
            raise ConfigError(
                f"{what} {item!r} is unknown; use one of {', '.join(CHANGES)} "
                "or a (label, {'dotted.field': value}) pair"
            )
        return CHANGES[item]
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], dict):
        return Change(str(item[0]), dict(item[1]), label=str(item[0]))
    raise ConfigError(f"{what} must be a name or a (label, settings) pair, got {item!r}")
