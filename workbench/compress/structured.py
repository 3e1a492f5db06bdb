"""Structured pruning that physically rebuilds smaller layers: whole neurons (Linear rows) or
channels (Conv filters) with the smallest L2 norm are removed, and every dependent layer follows
(the next layer's inputs, BatchNorm statistics, a Flatten into a Linear).

    from workbench.compress.structured import structured_prune
    small = structured_prune(model, 0.5)   # a new, smaller model; the input model is untouched

It handles plain feed-forward chains: an nn.Sequential (nested ones too) and the built-in MLP and
SmallCNN, whose forward is exactly their chain. Any other model is refused with the reason, rather
than rebuilt wrongly (a custom forward may add, concatenate or reuse layers).
"""
from __future__ import annotations

import copy

import torch
from torch import nn

from ..config import ConfigError
from ..train.models import MLP, SmallCNN
from .prune import check_amount, check_not_quantized, has_masks

PASS_THROUGH = (nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.LeakyReLU, nn.Dropout,
                nn.Identity, nn.MaxPool1d, nn.MaxPool2d, nn.AvgPool1d, nn.AvgPool2d,
                nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.Flatten)
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
            f"structured pruning rebuilds nn.Sequential chains and the built-in MLP and SmallCNN; "
            f"{type(model).__name__} has its own forward, whose layer dependencies (residuals, "
            "concatenation, reuse) cannot be read safely. Use unstructured pruning "
            "(workbench.compress.prune.magnitude_prune), wrap its layers in an nn.Sequential, or use a "
            "dependency-tracing library such as torch-pruning")
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
            raise ConfigError(f"structured pruning cannot follow a {type(m).__name__} layer; "
                              f"supported: Linear, Conv1d/2d, BatchNorm, activations, pooling, "
                              "Flatten, Dropout")
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
        new = cls(m.in_channels, len(keep), m.kernel_size, m.stride, m.padding, m.dilation,
                  bias=m.bias is not None, padding_mode=m.padding_mode)
    new.weight.data = m.weight.data[keep].clone()
    if m.bias is not None:
        new.bias.data = m.bias.data[keep].clone()
    return new


def _slice_in(m: nn.Module, keep: torch.Tensor, old_units: int) -> nn.Module:
    if isinstance(m, nn.Linear):
        if m.in_features % old_units:
            raise ConfigError(f"structured pruning: {m} takes {m.in_features} inputs, not a "
                              f"multiple of the {old_units} units before it")
        per = m.in_features // old_units  # a Flatten of C x H x W feeds H*W inputs per channel
        cols = (keep[:, None] * per + torch.arange(per)).flatten()
        new = nn.Linear(len(cols), m.out_features, bias=m.bias is not None)
        new.weight.data = m.weight.data[:, cols].clone()
    else:
        new = type(m)(len(keep), m.out_channels, m.kernel_size, m.stride, m.padding, m.dilation,
                      bias=m.bias is not None, padding_mode=m.padding_mode)
        new.weight.data = m.weight.data[:, keep].clone()
    if m.bias is not None:
        new.bias.data = m.bias.data.clone()
    return new


def _slice_norm(m: nn.Module, keep: torch.Tensor) -> nn.Module:
    new = type(m)(len(keep), eps=m.eps, momentum=m.momentum, affine=m.affine,
                  track_running_stats=m.track_running_stats)
    if m.affine:
        new.weight.data = m.weight.data[keep].clone()
        new.bias.data = m.bias.data[keep].clone()
    if m.track_running_stats:
        new.running_mean.data = m.running_mean[keep].clone()
        new.running_var.data = m.running_var[keep].clone()
        new.num_batches_tracked.data = m.num_batches_tracked.clone()
    return new


def structured_prune(model: nn.Module, amount) -> nn.Module:
    """A copy of `model` with `amount` of every hidden layer's neurons/channels removed (fraction
    in [0, 1], or a whole number of units per layer). The output layer keeps its size."""
    check_not_quantized(model, "prune")
    if has_masks(model):
        raise ConfigError("structured pruning needs a model without masks; call make_real first")
    model = copy.deepcopy(model)
    chain = _chain(model)
    producers = [k for k, (_, _, m) in enumerate(chain) if isinstance(m, PRODUCERS)]
    if len(producers) < 2:
        raise ConfigError(f"model {type(model).__name__} has {len(producers)} Linear/Conv layer(s); "
                          "structured pruning needs a hidden layer followed by another layer")
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
    return model


def layer_widths(model: nn.Module) -> list[int]:
    """Output sizes of every Linear/Conv in order: what structured pruning changed."""
    return [m.weight.shape[0] for m in model.modules() if isinstance(m, PRODUCERS)]
