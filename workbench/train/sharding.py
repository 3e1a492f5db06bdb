"""FSDP2 (torch.distributed.fsdp.fully_shard) inside a rank, and the bytes each rank holds.

    names = apply_fsdp(model, cfg)          # each block sharded, then the root
    with policy_compute(model, cfg, world_size): ...  # a forward in the dtypes FSDP computes in
    layer_blocks(model)                     # the layers of its first nn.ModuleList, or []
    per_rank_bytes(model, cfg, world_size, activations)  # predicted from the full shapes
    comm_bytes(model, cfg, world_size)      # DDP's buckets, or FSDP's gathered block and its buffers
    held_bytes(model, opt)                  # measured: the local shards this rank holds
    grad_bytes(model)                       # measured mid-step: the gradient shards it holds

Which modules are blocks: `distributed.fsdp_blocks` (names or patterns, as train.checkpoint takes
them), else the rule: the layers of the model's first nn.ModuleList (a transformer's blocks), or,
when it has none, every module that holds parameters of its own (Linear, Conv, Embedding, norms)
and shares none with another module. The root then shards what is left (tied weights stay there).

FSDP2 splits every parameter along its first dimension in chunks of ceil(rows / ranks), so what a
rank holds is known exactly from the shapes: rank r keeps rows [r*c, min((r+1)*c, rows)).
Gradients are shaped like the shards; AdamW keeps two states like them plus a 4-byte step per
parameter, SGD with momentum one.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch
from torch import nn

from ..config import ConfigError, RunConfig
from ..events import RANK
from .activation_checkpointing import resolve


def layer_blocks(model: nn.Module) -> list[str]:
    """The layers of the model's first nn.ModuleList (a transformer's blocks), or [] when it has
    none: the blocks FSDP shards first, and what the tune checkpoints."""
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module):
            return [f"{name}.{i}" if name else str(i) for i in range(len(module))]
    return []


def block_names(model: nn.Module, patterns: list[str]) -> list[str]:
    if patterns:
        return resolve(model, patterns, "distributed.fsdp_blocks")
    layers = layer_blocks(model)
    if layers:
        return layers
    owners: dict[int, list[str]] = {}
    for name, module in model.named_modules():
        for p in module.parameters(recurse=False):
            owners.setdefault(id(p), []).append(name)
    return [
        name
        for name, module in model.named_modules()
        if name
        and any(True for _ in module.parameters(recurse=False))
        and all(len(owners[id(p)]) == 1 for p in module.parameters(recurse=False))
    ]


# The parts of a rank's memory, predicted before launch and measured in the run (memory_per_rank,
# workbench.train.trainer), each byte for byte: the ones every reader and writer names.
PARAMETERS, GRADIENTS, OPTIMIZER = "parameters", "gradients", "optimizer"
ACTIVATIONS = "activations"  # what one micro-batch saves for backward
HELD = (PARAMETERS, GRADIENTS, OPTIMIZER)  # what a strategy shards (FSDP) or replicates (DDP)
MEMORY_PARTS = (*HELD, ACTIVATIONS)
MID_STEP = (GRADIENTS, ACTIVATIONS)  # held only inside a step, so read there
PEAK = "peak"  # beside the parts: the rank's peak, predicted (not exactly) and measured
PEAK_TOLERANCE = 0.15  # a peak predicted within this fraction of the measured one holds

COMPUTE_DTYPE = torch.bfloat16  # fsdp_mixed_precision: the parameters' dtype in forward and backward
REDUCE_DTYPE = torch.float32  # and the gradients' as they are reduce-scattered


def check_shardable(model: nn.Module) -> None:
    """Refuse what fully_shard cannot shard, naming it: a scalar parameter has no dimension to split
    (asked before launch by the pre-launch check, and again here by each rank)."""
    scalars = [name for name, p in model.named_parameters() if p.dim() == 0]
    if scalars:
        shown = ", ".join(scalars[:3]) + (f" and {len(scalars) - 3} more" if len(scalars) > 3 else "")
        raise ConfigError(
            f"distributed.strategy 'fsdp' cannot shard the scalar parameter(s) {shown}: "
            "fully_shard splits every parameter along its first dimension; make each a "
            "1-element tensor (nn.Parameter(torch.ones(1))) or use distributed.strategy "
            "'ddp'"
        )


def apply_fsdp(model: nn.Module, cfg: RunConfig) -> list[str]:
    """Shard the blocks, then the root, in place; returns the blocks' names."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    check_shardable(model)
    d = cfg.distributed
    kwargs: dict = {"reshard_after_forward": d.reshard_after_forward}
    if d.fsdp_mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=COMPUTE_DTYPE, reduce_dtype=REDUCE_DTYPE)
    if d.cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    names = block_names(model, d.fsdp_blocks)
    modules = dict(model.named_modules())
    for name in names:
        fully_shard(modules[name], **kwargs)
    fully_shard(model, **kwargs)
    return names


def _cast_floating(value):
    if isinstance(value, torch.Tensor):
        return value.to(COMPUTE_DTYPE) if value.is_floating_point() else value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_floating(v) for v in value)
    if isinstance(value, dict):
        return {k: _cast_floating(v) for k, v in value.items()}
    return value


@contextmanager
def policy_compute(model: nn.Module, cfg: RunConfig, world_size: int):
    """While active, the unwrapped model computes as apply_fsdp's mixed-precision policy makes its
    ranks compute: floating parameters in bf16, and each unit's (every block's and the root's)
    floating inputs cast to bf16 on entry (the policy's cast_forward_inputs); buffers, integer
    inputs and the outputs are left as they are, as FSDP leaves them. Nothing changes without the
    policy, or on one rank (the trainer shards nothing there). The parameters are restored whole:
    their fp32 values are kept, not cast back."""
    d = cfg.distributed
    if not (d.strategy == "fsdp" and d.fsdp_mixed_precision and world_size > 1):
        yield
        return

    def cast_inputs(module, args, kwargs):
        return _cast_floating(args), _cast_floating(kwargs)

    modules = dict(model.named_modules())
    handles = [
        modules[name].register_forward_pre_hook(cast_inputs, with_kwargs=True)
        for name in [*block_names(model, d.fsdp_blocks), ""]
    ]
    kept = [(p, p.data) for p in model.parameters() if p.is_floating_point()]  # tied ones once
    for p, data in kept:
        p.data = data.to(COMPUTE_DTYPE)
    try:
        yield
    finally:
        for h in handles:
            h.remove()
        for p, data in kept:
            p.data = data


def _rows(shape: torch.Size, rank: int, world_size: int) -> int:
    if not shape:
        return 1 if rank == 0 else 0  # a scalar lives on one rank
    chunk = math.ceil(shape[0] / world_size)
    return max(0, min(chunk, shape[0] - rank * chunk))


def optimizer_factor(cfg: RunConfig) -> tuple[int, int]:
    """(states shaped like a parameter, bytes of per-parameter scalars) for the config's optimizer."""
    if cfg.optim.name == "adamw":
        return 2, 4  # exp_avg, exp_avg_sq, and the step as a float32 scalar
    return (1 if cfg.optim.momentum else 0), 0


def per_rank_bytes(
    model: nn.Module, cfg: RunConfig, world_size: int, activations: int | None = None
) -> list[dict]:
    """Predicted parameter, gradient and optimizer bytes on each rank, from the unsharded model:
    whole under DDP, each rank's chunks under FSDP; with `activations`, the bytes one micro-batch
    saves for backward (footprint.batch_activations), the same on every rank."""
    shaped, scalar = optimizer_factor(cfg)
    params = list(model.parameters())
    out = []
    for rank in range(world_size):
        total = 0
        for p in params:
            per_row = math.prod(p.shape[1:]) if p.dim() else 1
            rows = (
                _rows(p.shape, rank, world_size)
                if cfg.distributed.strategy == "fsdp"
                else (p.shape[0] if p.dim() else 1)
            )
            total += rows * per_row * p.element_size()
        out.append(
            {
                RANK: rank,
                PARAMETERS: total,
                GRADIENTS: total,
                OPTIMIZER: shaped * total + scalar * len(params),
            }
        )
        if activations is not None:
            out[-1][ACTIVATIONS] = activations
    return out


def comm_bytes(model: nn.Module, cfg: RunConfig, world_size: int) -> int:
    """What a step holds for communication beyond the parts, from the unsharded model: DDP's
    gradient buckets (a copy of every gradient), or, under FSDP, a unit (a block, or what the root
    keeps) gathered whole with its whole gradients until they are reduce-scattered, while FSDP
    still keeps the reduce-scatter input of the unit before it (its whole gradients in the reduce
    dtype, held until the next unit's reduce-scatter: set_reduce_scatter_max_input_buffers'
    default of one). Which unit precedes which is left out: the largest unit, with the largest
    input of another."""
    if world_size < 2:
        return 0
    if cfg.distributed.strategy != "fsdp":
        return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    modules = dict(model.named_modules())
    units = [list(modules[n].parameters()) for n in block_names(model, cfg.distributed.fsdp_blocks)]
    blocked = {id(p) for unit in units for p in unit}
    units.append([p for p in model.parameters() if id(p) not in blocked])
    mixed = cfg.distributed.fsdp_mixed_precision
    gathered = COMPUTE_DTYPE.itemsize if mixed else None  # bf16 parameters in compute
    reduced = REDUCE_DTYPE.itemsize if mixed else None
    computing = [
        sum(p.numel() * ((gathered or p.element_size()) + p.element_size()) for p in unit) for unit in units
    ]
    reducing = [
        sum(p.numel() * (reduced or p.element_size()) for p in unit if p.requires_grad) for unit in units
    ]
    return max(
        held + max((r for j, r in enumerate(reducing) if j != i), default=0)
        for i, held in enumerate(computing)
    )


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def held_bytes(model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    """The parameter and optimizer-state bytes this rank holds now (local shards under FSDP)."""
    params = sum(_local(p).numel() * p.element_size() for p in model.parameters())
    state = sum(
        _local(v).numel() * v.element_size()
        for s in opt.state.values()
        for v in s.values()
        if torch.is_tensor(v)
    )
    return {PARAMETERS: params, OPTIMIZER: state}


def grad_bytes(model: nn.Module) -> int:
    """The gradient bytes this rank holds now (local shards under FSDP): 0 between steps, when the
    optimizer has zeroed them to None."""
    return sum(
        _local(p.grad).numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None
    )
