"""Unstructured pruning with masks (`torch.nn.utils.prune`), the input checks every pruning path
shares, and the "make it real" step that removes the masks.

    from workbench.compress.unstructured import magnitude_prune, make_real, sparsity
    magnitude_prune(model, 0.7, scope="global"); make_real(model); print(sparsity(model))

Every matmul weight is a target (Linear, convolutions, Hugging Face's Conv1D, attention's fused
in_proj_weight); a weight tied between layers (an embedding and its output head) is pruned once
and stays tied. Masks alone never make a model faster: the weight is still a dense tensor (now with
zeros) and a forward pre-hook recomputes `weight = weight_orig * mask` on every call. `make_real` drops the
hooks; `to_sparse` stores Linear weights as CSR, which pays off only at high sparsity.
"""

from __future__ import annotations

import copy
import math
from typing import Iterable

import torch
from torch import nn
from torch.nn.utils import prune as tprune

from ..config import ConfigError
from . import quiet
from .coverage import coverage
from .layers import (
    conv1d_to_linear,
    holders,
    model_weights,
    parameterized_layers,
    shared_groups,
    tensor_of,
    weight_targets,
)

METHODS = ("magnitude", "random")
SCOPES = ("layer", "global")


def is_quantized(model: nn.Module) -> bool:
    """True for models from `workbench.compress.quantize` or any torch.ao / torchao quantized module."""
    if getattr(model, "_workbench_quantized", None):
        return True
    for m in model.modules():
        if type(m).__module__.startswith(("torch.ao.nn.quantized", "torch.nn.quantized")):
            return True
        if getattr(m, "_workbench_quantized", None):
            return True
        for p in m._parameters.values():  # torchao swaps weights for int8 tensor subclasses
            if p is not None and type(p) not in (torch.Tensor, nn.Parameter):
                return True
    return False


def check_not_quantized(model: nn.Module, action: str) -> None:
    if is_quantized(model):
        raise ConfigError(
            f"cannot {action} a quantized model: its weights are int8 and no longer "
            f"trainable or maskable; {action} the float model first, then quantize"
        )


def check_amount(amount, n_units: int, field: str = "amount", unit: str = "parameters") -> float:
    """An amount is a fraction in [0, 1] or a whole count <= n_units. Returns the fraction."""
    if isinstance(amount, bool) or not isinstance(amount, (int, float)):
        raise ConfigError(f"{field} must be a fraction in [0, 1] or a whole number of {unit}, got {amount!r}")
    if isinstance(amount, float):
        if not math.isfinite(amount) or not 0.0 <= amount <= 1.0:
            raise ConfigError(f"{field} must be a fraction in [0, 1], got {amount!r}")
        return float(amount)
    if not 0 <= amount <= n_units:
        raise ConfigError(
            f"{field} must be a count between 0 and {n_units} {unit} (the prunable total), got {amount}"
        )
    return amount / n_units if n_units else 0.0


def prunable_layers(
    model: nn.Module, names: Iterable[str] | None = None, param: str = "weight"
) -> list[tuple[str, nn.Module, str]]:
    """(name, module, parameter name) of the weights to prune: every matmul weight (Linear,
    convolutions, Hugging Face's Conv1D, attention's fused in_proj_weight), or those of the
    layers named. Unknown names and a model without any are errors that list what exists."""
    modules = dict(model.named_modules())
    if names is None:
        found = weight_targets(model)
        if not found:
            raise ConfigError(
                f"model {type(model).__name__} has no prunable layer (Linear, Conv or "
                "Hugging Face Conv1D); nothing to prune"
            )
        return found
    names = [names] if isinstance(names, str) else list(names)
    if not names:
        raise ConfigError("layers must name at least one module, got an empty list")
    found = []
    for n in names:
        if n not in modules:
            have = [k for k, _, _ in weight_targets(model)]
            raise ConfigError(
                f"layers: no module named {n!r} in {type(model).__name__}; "
                f"prunable modules: {', '.join(have) or 'none'}"
            )
        m = modules[n]
        if tensor_of(m, param) is None:
            raise ConfigError(
                f"param: module {n!r} ({type(m).__name__}) has no parameter "
                f"{param!r}; it has: {', '.join(m._parameters) or 'none'}"
            )
        found.append((n, m, param))
    return found


def magnitude_prune(
    model: nn.Module,
    amount,
    *,
    scope: str = "layer",
    method: str = "magnitude",
    layers: Iterable[str] | None = None,
    param: str = "weight",
    seed: int = 0,
) -> nn.Module:
    """Mask the smallest-|w| (or random, a control) weights, per layer or globally, in place.

    `amount`: fraction in [0, 1] or a whole count of weights (per layer for scope="layer", over
    all chosen layers for scope="global"). A weight shared by several layers (a tied embedding
    and head) is pruned once, and every layer holding it applies the same mask."""
    check_not_quantized(model, "prune")
    if method not in METHODS:
        raise ConfigError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if scope not in SCOPES:
        raise ConfigError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    groups = shared_groups(prunable_layers(model, layers, param))
    found = [g[0] for g in groups]
    sizes = [tensor_of(m, p).numel() for _, m, p in found]
    torch.manual_seed(seed)
    if scope == "global":
        frac = check_amount(amount, sum(sizes))
        count = amount if isinstance(amount, int) else round(frac * sum(sizes))
        method_cls = tprune.L1Unstructured if method == "magnitude" else tprune.RandomUnstructured
        tprune.global_unstructured([(m, p) for _, m, p in found], method_cls, amount=int(count))
    else:
        check_amount(amount, min(sizes), unit="parameters in the smallest chosen layer")
        for _, m, p in found:
            if method == "magnitude":
                tprune.l1_unstructured(m, p, amount=amount)
            else:
                tprune.random_unstructured(m, p, amount=amount)
    for name, first, p in found:  # the same mask on every holder of a shared weight
        for other, m, q in holders(model, tensor_of(first, p)):
            if other != name:
                tprune.custom_from_mask(m, q, getattr(first, f"{p}_mask"))
    refresh_masks(model)
    return model


def pruning_coverage(model: nn.Module, layers: Iterable[str] | None = None, param: str = "weight") -> dict:
    """What `magnitude_prune(model, ..., layers=layers)` touches: the weights it masks, a shared
    weight once (a tied embedding is pruned with its head), and every layer it leaves, with why."""
    touched = {}
    for (name, m, p), *_ in shared_groups(prunable_layers(model, layers, param)):
        touched[name] = tensor_of(m, p).numel()
    held = {id(tensor_of(model.get_submodule(n), p)) for n, _, p in prunable_layers(model, layers, param)}
    for name, m, own in parameterized_layers(model):
        if name not in touched and any(id(tensor_of(m, q)) in held for q in own):
            touched[name] = 0  # holds a pruned weight: pruned with it, counted there
    return coverage(model, touched)


def pruned_targets(model: nn.Module) -> list[tuple[str, nn.Module, str]]:
    """(name, module, parameter name) of every weight that carries a pruning mask now."""
    out = []
    for name, m in model.named_modules():
        for hook in m._forward_pre_hooks.values():
            if isinstance(hook, tprune.BasePruningMethod):
                out.append((name, m, hook._tensor_name))
    return out


@torch.no_grad()
def refresh_masks(model: nn.Module) -> None:
    """Recompute masked weights outside autograd. Pruning and training leave them holding a
    graph, which blocks copy.deepcopy of the model."""
    for m in model.modules():
        for hook in m._forward_pre_hooks.values():
            if isinstance(hook, tprune.BasePruningMethod):
                hook(m, None)


def copy_model(model: nn.Module) -> nn.Module:
    """copy.deepcopy that also works on a masked model after a forward with autograd on."""
    refresh_masks(model)
    return copy.deepcopy(model)


def has_masks(model: nn.Module) -> bool:
    return tprune.is_pruned(model)


def make_real(model: nn.Module) -> nn.Module:
    """Remove every pruning mask and hook, in place: the zeros become plain weights."""
    groups = shared_groups(pruned_targets(model))
    if not groups:
        raise ConfigError("make_real: the model carries no pruning masks; prune it first")
    for group in groups:
        for _, m, p in group:
            tprune.remove(m, p)
        _, first, p = group[0]
        for _, m, q in group[1:]:  # removing gave each holder its own copy: tie them again
            setattr(m, q, getattr(first, p))
    return model


def sparsity(model: nn.Module) -> dict:
    """Zeros in the prunable weights (masked values count as zero, a shared weight once), over
    those weights (`sparsity`) and over every parameter of the model (`model_sparsity`)."""
    nonzero = total = 0
    seen: set[int] = set()
    for _, m, p in weight_targets(model) + [
        (n, m, "weight") for n, m in model.named_modules() if isinstance(m, SparseLinear)
    ]:
        key = id(tensor_of(m, p))
        if key in seen:
            continue
        seen.add(key)
        w = getattr(m, p)
        w = w.to_dense() if w.layout != torch.strided else w
        nonzero += int((w != 0).sum())
        total += w.numel()
    all_params = model_weights(model)
    return {
        "nonzero_weights": nonzero,
        "total_weights": total,
        "params": all_params,
        "sparsity": round(1 - nonzero / total, 4) if total else 0.0,
        "model_sparsity": round((total - nonzero) / all_params, 4) if all_params else 0.0,
    }


class SparseLinear(nn.Module):
    """A Linear whose weight is stored as CSR and multiplied by a sparse kernel."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        with quiet.sparse_csr():  # said by to_sparse_csr and again by nn.Parameter
            self.weight = nn.Parameter(linear.weight.detach().to_sparse_csr(), requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)

    def forward(self, x):
        flat = x.reshape(-1, self.in_features)
        out = torch.sparse.mm(self.weight, flat.t()).t()
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)


def to_sparse(model: nn.Module) -> nn.Module:
    """Swap every unmasked Linear for a CSR SparseLinear, in place (inference only)."""
    if has_masks(model):
        raise ConfigError("to_sparse: remove the masks first with make_real(model)")
    conv1d_to_linear(model)  # Hugging Face's Conv1D is a Linear stored transposed
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, SparseLinear(child))
                swapped += 1
    if not swapped:
        raise ConfigError(f"to_sparse: model {type(model).__name__} has no nn.Linear to convert")
    return model
