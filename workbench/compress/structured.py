"""Structured pruning: whole neurons (Linear rows) or channels (Conv filters) with the smallest L2
norm are removed, and every dependent layer follows (the next layer's inputs, BatchNorm
statistics, a Flatten into a Linear, a skip connection), giving a physically smaller model.

    from workbench.compress.structured import structured_prune, structured_coverage
    small = structured_prune(model, 0.5, example=subject.example(2))  # the input is untouched
    structured_coverage(model, small)     # which layers shrank, which were left and why

Two tools, one entry point. Plain feed-forward chains (an nn.Sequential, nested ones too, and the
built-in MLP and SmallCNN, whose forward is exactly their chain) are rebuilt here, without a
trace: every hidden layer loses exactly `amount` of its units (a fraction, or a whole number per
layer) and the output layer keeps its size. Every other model (residual blocks, attention,
Hugging Face layers) goes through torch-pruning's dependency graph (`graph_prune`), which needs
example inputs to trace and refuses, with the reason, a model it cannot prune so that it still runs.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..config import ConfigError
from ..train.models import MLP, SmallCNN
from .coverage import coverage
from .graph_prune import graph_prune
from .layers import model_weights, parameterized_layers
from .unstructured import check_amount, check_not_quantized, has_masks

PASS_THROUGH = (
    nn.ReLU,
    nn.GELU,
    nn.SiLU,
    nn.Tanh,
    nn.Sigmoid,
    nn.LeakyReLU,
    nn.Dropout,
    nn.Identity,
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.AvgPool1d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.Flatten,
)
PRODUCERS = (nn.Linear, nn.Conv1d, nn.Conv2d)
NORMS = (nn.BatchNorm1d, nn.BatchNorm2d)


def _chain(model: nn.Module) -> list[tuple[nn.Sequential, int, nn.Module]]:
    """The model's layers in execution order, each with its parent Sequential and index."""
    if isinstance(model, MLP):
        roots = [model.net]
    elif isinstance(model, SmallCNN):
        roots = [model.features, model.head]
    elif type(model) is nn.Sequential:
        roots = [model]
    else:
        raise ConfigError(
            f"the chain pruner rebuilds nn.Sequential chains and the built-in MLP and SmallCNN; "
            f"{type(model).__name__} has its own forward, whose layer dependencies (residuals, "
            "concatenation, reuse) it cannot read: give example inputs, and torch-pruning's "
            "dependency graph prunes it"
        )
    out: list = []

    def walk(seq: nn.Sequential):
        for i, m in enumerate(seq):
            if type(m) is nn.Sequential:
                walk(m)
            else:
                out.append((seq, i, m))

    for r in roots:
        walk(r)
    for _, _, m in out:
        if not isinstance(m, PRODUCERS + NORMS + PASS_THROUGH):
            raise ConfigError(
                f"structured pruning cannot follow a {type(m).__name__} layer; "
                f"supported: Linear, Conv1d/2d, BatchNorm, activations, pooling, "
                "Flatten, Dropout"
            )
        if isinstance(m, (nn.Conv1d, nn.Conv2d)) and m.groups != 1:
            raise ConfigError(f"structured pruning needs groups=1 convolutions, got {m}")
    return out


def _keep(weight: torch.Tensor, n_keep: int) -> torch.Tensor:
    """Indices (sorted) of the output units with the largest L2 norm."""
    norms = weight.detach().flatten(1).norm(dim=1)
    return norms.topk(n_keep).indices.sort().values


def _slice_out(m: nn.Module, keep: torch.Tensor) -> nn.Module:
    if isinstance(m, nn.Linear):
        new = nn.Linear(m.in_features, len(keep), bias=m.bias is not None)
    else:
        cls = type(m)
        new = cls(
            m.in_channels,
            len(keep),
            m.kernel_size,
            m.stride,
            m.padding,
            m.dilation,
            bias=m.bias is not None,
            padding_mode=m.padding_mode,
        )
    new.weight.data = m.weight.data[keep].clone()
    if m.bias is not None:
        new.bias.data = m.bias.data[keep].clone()
    return new


def _slice_in(m: nn.Module, keep: torch.Tensor, old_units: int) -> nn.Module:
    if isinstance(m, nn.Linear):
        if m.in_features % old_units:
            raise ConfigError(
                f"structured pruning: {m} takes {m.in_features} inputs, not a "
                f"multiple of the {old_units} units before it"
            )
        per = m.in_features // old_units  # a Flatten of C x H x W feeds H*W inputs per channel
        cols = (keep[:, None] * per + torch.arange(per)).flatten()
        new = nn.Linear(len(cols), m.out_features, bias=m.bias is not None)
        new.weight.data = m.weight.data[:, cols].clone()
    else:
        new = type(m)(
            len(keep),
            m.out_channels,
            m.kernel_size,
            m.stride,
            m.padding,
            m.dilation,
            bias=m.bias is not None,
            padding_mode=m.padding_mode,
        )
        new.weight.data = m.weight.data[:, keep].clone()
    if m.bias is not None:
        new.bias.data = m.bias.data.clone()
    return new


def _slice_norm(m: nn.Module, keep: torch.Tensor) -> nn.Module:
    new = type(m)(
        len(keep), eps=m.eps, momentum=m.momentum, affine=m.affine, track_running_stats=m.track_running_stats
    )
    if m.affine:
        new.weight.data = m.weight.data[keep].clone()
        new.bias.data = m.bias.data[keep].clone()
    if m.track_running_stats:
        new.running_mean.data = m.running_mean[keep].clone()
        new.running_var.data = m.running_var[keep].clone()
        new.num_batches_tracked.data = m.num_batches_tracked.clone()
    return new


def is_chain(model: nn.Module) -> bool:
    """A model the chain pruner rebuilds: a Sequential (or built-in MLP/SmallCNN) of layers it
    knows, with at least a hidden layer."""
    try:
        chain = _chain(model)
    except ConfigError:
        return False
    return sum(isinstance(m, PRODUCERS) for _, _, m in chain) >= 2


def structured_prune(
    model: nn.Module, amount, example: torch.Tensor | None = None, tool: str = "auto"
) -> nn.Module:
    """A copy of `model` with `amount` of its neurons/channels removed. `tool`: "chain" (this
    module's rebuild of a plain chain), "torch-pruning" (the dependency graph; needs `example`),
    or "auto": the chain pruner for a chain, torch-pruning for every other model."""
    check_not_quantized(model, "prune")
    if has_masks(model):
        raise ConfigError("structured pruning needs a model without masks; call make_real first")
    if tool not in ("auto", "chain", "torch-pruning"):
        raise ConfigError(f"tool must be one of auto, chain, torch-pruning, got {tool!r}")
    if tool == "chain" or (tool == "auto" and (is_chain(model) or example is None)):
        return chain_prune(model, amount)
    return graph_prune(model, amount, example)


def chain_prune(model: nn.Module, amount) -> nn.Module:
    """The chain pruner: `amount` of every hidden layer's neurons/channels removed (fraction in
    [0, 1], or a whole number of units per layer). The output layer keeps its size."""
    model = copy.deepcopy(model)
    chain = _chain(model)
    producers = [k for k, (_, _, m) in enumerate(chain) if isinstance(m, PRODUCERS)]
    if len(producers) < 2:
        raise ConfigError(
            f"model {type(model).__name__} has {len(producers)} Linear/Conv layer(s); "
            "structured pruning needs a hidden layer followed by another layer"
        )
    widths = [chain[k][2].weight.shape[0] for k in producers[:-1]]
    frac = check_amount(amount, min(widths), unit="units (neurons or channels) per layer")
    for a, b in zip(producers, producers[1:]):
        parent, idx, layer = chain[a]
        units = layer.weight.shape[0]
        n_keep = units - amount if isinstance(amount, int) else round(units * (1 - frac))
        keep = _keep(layer.weight, max(1, n_keep))
        parent[idx] = _slice_out(layer, keep)
        for parent_k, idx_k, mid in (chain[k] for k in range(a + 1, b)):
            if isinstance(mid, NORMS):
                parent_k[idx_k] = _slice_norm(mid, keep)
        nparent, nidx, nxt = chain[b]
        nparent[nidx] = _slice_in(nxt, keep, units)
        chain[b] = (nparent, nidx, nparent[nidx])  # the next step slices this one's outputs
    head = {m: n for n, m in model.named_modules()}[chain[producers[-1]][2]]
    model.workbench_structure = {
        "tool": "chain",
        "notes": [],
        "left": {head: "the output layer: it keeps the model's output size"},
    }
    return model


def structured_coverage(dense: nn.Module, small: nn.Module) -> dict:
    """Which layers structured pruning shrank (their weights counted at the dense size), which it
    left as they were and why, and the share of the dense model's weights in the shrunk layers."""

    def sizes(model):  # element counts: a Conv1D run as Linear holds its weight transposed
        return {
            n: sum(m._parameters[p].numel() for p in own if p in m._parameters)
            for n, m, own in parameterized_layers(model)
        }

    before, after = sizes(dense), sizes(small)
    touched = {n: before[n] for n in after if n in before and after[n] != before[n]}
    info = getattr(small, "workbench_structure", {})
    cov = coverage(small, touched, info.get("left", {}), total=model_weights(dense))
    return {**cov, "tool": info.get("tool"), "notes": info.get("notes", [])}


def layer_widths(model: nn.Module) -> list[int]:
    """Output sizes of every Linear/Conv in order: what structured pruning changed."""
    return [m.weight.shape[0] for m in model.modules() if isinstance(m, PRODUCERS)]
