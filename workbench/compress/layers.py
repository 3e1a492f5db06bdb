"""A model's parameterized layers as the compression lab sees them: the matmul weights it can prune
or convert (Linear, convolutions, Hugging Face's `Conv1D`, attention's fused input projection),
everything else with the reason it is left alone, and weights that several layers share (a tied
embedding and output head), which are counted, pruned and kept once.

    from workbench.compress.layers import weight_targets, unique_params, conv1d_to_linear
    weight_targets(gpt2)       # [('transformer.h.0.attn.c_attn', module, 'weight'), ...]

Hugging Face's `Conv1D` (GPT-2's attention and MLP layers) is a Linear whose weight is stored
transposed, (in, out): it is recognised without importing transformers (a model that holds one
has imported it already), pruned elementwise as it is, and swapped for the equal `nn.Linear`
where a tool only knows Linear (int8 kernels, dependency-graph pruning).
"""

from __future__ import annotations

import sys

import torch
from torch import nn

CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
NORMS = (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm, nn.modules.instancenorm._InstanceNorm)
PRUNE_PARAMS = ("weight", "in_proj_weight")  # what a pruning target's tensor is called

LEFT_REASONS = {
    "embedding": "an embedding is a table lookup, not a matmul: the lab leaves it as it is",
    "norm": "normalization: a per-channel scale and shift, a few weights and no matmul",
    "parameter": "a bare parameter of the model (a position table, a scale), not a layer",
    "other": "a layer type the lab does not compress",
}


def hf_conv1d_class():
    """transformers' Conv1D class when transformers is loaded, else None (never imports it)."""
    return getattr(sys.modules.get("transformers.pytorch_utils"), "Conv1D", None)


def is_hf_conv1d(module: nn.Module) -> bool:
    cls = hf_conv1d_class()
    return cls is not None and isinstance(module, cls)


def kind_of(module: nn.Module) -> str:
    """linear | conv | hf_conv1d | attention | embedding | norm | other."""
    if isinstance(module, nn.Linear):
        return "linear"
    if isinstance(module, CONVS):
        return "conv"
    if is_hf_conv1d(module):
        return "hf_conv1d"
    if isinstance(module, nn.MultiheadAttention):
        return "attention"
    if isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
        return "embedding"
    if isinstance(module, NORMS):
        return "norm"
    return "other"


def tensor_of(module: nn.Module, pname: str) -> torch.Tensor | None:
    """The stored tensor behind `module.pname`: the original while pruning masks are attached."""
    return module._parameters.get(f"{pname}_orig", module._parameters.get(pname))


def weight_targets(model: nn.Module) -> list[tuple[str, nn.Module, str]]:
    """(layer name, module, parameter name) of every matmul weight the lab can prune."""
    out = []
    for name, m in model.named_modules():
        kind = kind_of(m)
        if kind in ("linear", "conv", "hf_conv1d"):
            out.append((name, m, "weight"))
        elif kind == "attention" and tensor_of(m, "in_proj_weight") is not None:
            out.append((name, m, "in_proj_weight"))  # q, k and v fused in one bare parameter
    return out


def shared_groups(targets) -> list[list[tuple[str, nn.Module, str]]]:
    """Targets grouped by the tensor they hold: a tied head and embedding form one group."""
    groups: dict[int, list] = {}
    for t in targets:
        groups.setdefault(id(tensor_of(t[1], t[2])), []).append(t)
    return list(groups.values())


def holders(model: nn.Module, tensor: torch.Tensor) -> list[tuple[str, nn.Module, str]]:
    """(name, module, parameter name) of every module holding `tensor`: a tied embedding and
    head both hold one."""
    return [
        (n, m, p.removesuffix("_orig"))
        for n, m in model.named_modules()
        for p, v in m._parameters.items()
        if v is tensor
    ]


def unique_params(model: nn.Module) -> dict[int, tuple[str, torch.Tensor]]:
    """id -> (name, tensor) of every parameter, a tied one once (pruning's *_orig counted as the
    weight it stands for)."""
    out: dict[int, tuple[str, torch.Tensor]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        out.setdefault(id(p), (name.removesuffix("_orig"), p))
    return out


def model_weights(model: nn.Module) -> int:
    """Parameters of the model, each shared tensor counted once."""
    return sum(p.numel() for _, p in unique_params(model).values())


def parameterized_layers(model: nn.Module) -> list[tuple[str, nn.Module, list[str]]]:
    """(name, module, its own parameter names) for every module holding parameters directly."""
    out = []
    for name, m in model.named_modules():
        own = [p.removesuffix("_orig") for p, v in m._parameters.items() if v is not None]
        if own:
            out.append((name, m, own))
    return out


def conv1d_to_linear(model: nn.Module) -> list[str]:
    """Swap every Hugging Face Conv1D for the nn.Linear that computes the same (its weight
    transposed), in place. Returns the swapped layers' names."""
    swapped = []
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            if not is_hf_conv1d(child):
                continue
            n_in, n_out = child.weight.shape
            linear = nn.Linear(
                n_in, n_out, bias=child.bias is not None, device=child.weight.device, dtype=child.weight.dtype
            )
            with torch.no_grad():
                linear.weight.copy_(child.weight.t())
                if child.bias is not None:
                    linear.bias.copy_(child.bias)
            setattr(parent, child_name, linear)
            swapped.append(f"{parent_name}.{child_name}" if parent_name else child_name)
    return swapped
