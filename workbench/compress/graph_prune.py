"""Structured pruning of models that are not plain chains (residual blocks, attention, Hugging Face
layers) through torch-pruning's dependency graph: it traces one forward, groups every layer whose
channels are coupled (a convolution, its BatchNorm, the skip connection it is added to, the next
layer's inputs) and removes the lowest-L2 channels of each group together.

    from workbench.compress.graph_prune import graph_prune
    small = graph_prune(model, 0.5, example=subject.example(2))   # a smaller copy; model untouched

What it leaves alone, so that the result still runs and keeps its output: the output layer (its
outputs are the logits), embeddings (their width is a transformer's residual stream, which the
model's own attributes such as n_embd or split sizes record), and groups whose channels are split
into attention heads inside the model's forward (a fused qkv projection: pruning it needs the head
layout). Hugging Face attention blocks that share key/value heads among query heads (Llama and
its kin, with or without grouped-query attention) are kept whole and left out of the trace: the
group search loops on their head splits. nn.MultiheadAttention is pruned with its head count
(`num_heads`), and `round_to` keeps widths a multiple of a number. The search runs under a time
limit; a longer one says what it is doing (`long_search`). The pruned copy is run on two batch
sizes and must give the model's output shape, else it is refused with the reason. Hugging Face's
Conv1D layers are swapped for the nn.Linear they are first (torch-pruning knows Linear).
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
import warnings

import torch
from torch import nn

from ..config import ConfigError
from ..train.contract import TakeLogits, output_adapter
from .layers import conv1d_to_linear, kind_of
from .long_search import Search, SearchTimeout

# Ops after which a group's channels are split into heads (or multiplied with another
# activation): pruning such a group needs the model's head layout, which a trace does not give.
HEAD_OPS = ("Split", "Unbind", "Bmm", "ScaledDotProduct", "Baddbmm")
ROOTS = (nn.Linear, nn.modules.conv._ConvNd)

REASONS = {
    "head": "the output layer: it keeps the model's output size",
    "embedding": "an embedding: its width is the residual stream of a transformer, which the "
    "model's own attributes (n_embd, split sizes) record",
    "heads": "its outputs are split into attention heads inside the model's forward: pruning "
    "them needs the head layout, which a trace does not give",
    "parameter": "a bare parameter coupled to the residual stream",
    "coupled": "its channels are coupled to a layer kept whole (the residual stream, the output "
    "or an attention head split)",
    "gqa": "grouped-query attention: its query heads share KV groups, a layout a trace does not "
    "give; kept whole",
    "rotary": "attention that splits its projections into heads and rotates them inside forward, "
    "a layout a trace does not give; kept whole",
}


def logits_of(out):
    """The logits in whatever a model returns (the contract's adapters)."""
    return TakeLogits(output_adapter(out))(None, None, out)


@torch.no_grad()
def output_layer(model: nn.Module, example: torch.Tensor) -> str | None:
    """The last Linear/Conv run in a forward whose outputs have the logits' width: the head."""
    calls: list[tuple[str, tuple]] = []
    hooks = [
        m.register_forward_hook(lambda mod, a, out, n=n: calls.append((n, tuple(out.shape))))
        for n, m in model.named_modules()
        if isinstance(m, ROOTS)
    ]
    try:
        width = logits_of(model(example)).shape
    finally:
        for h in hooks:
            h.remove()
    for name, shape in reversed(calls):
        if shape[-1] == width[-1] or (len(shape) == len(width) + 2 and shape[1] == width[1]):
            return name
    return None


def _splits_heads(group) -> bool:
    for dep, _ in group:
        for node in (dep.source, dep.target):
            if any(op in type(node.grad_fn).__name__ for op in HEAD_OPS):
                return True
    return False


def _bare_params(model: nn.Module) -> dict[str, nn.Parameter]:
    """Parameters held by modules torch-pruning has no pruner for (a position table)."""
    out = {}
    for name, m in model.named_modules():
        if kind_of(m) in ("other",) and not isinstance(m, ROOTS):
            for pname, p in m._parameters.items():
                if p is not None:
                    out[f"{name}.{pname}" if name else pname] = p
    return out


GRAPH_TIME_LIMIT_S = 30.0  # torch-pruning's graph search loops forever on some layouts


def attention_blocks(model: nn.Module) -> dict[str, nn.Module]:
    """Hugging Face attention blocks that say how many query heads share a key/value head
    (`num_key_value_groups`: Llama, Mistral, Qwen2 and their kin, with or without grouped-query
    attention). Their forward splits the projections into heads, rotates halves of each head and
    repeats the KV heads for their query groups: torch-pruning's search of the layers coupled to
    v_proj never ends on that (a 2-layer Llama, with 2 KV heads for 4 query heads and with 4)."""
    return {
        n: m for n, m in model.named_modules() if isinstance(getattr(m, "num_key_value_groups", None), int)
    }


def attention_reason(block: nn.Module) -> str:
    if block.num_key_value_groups > 1:
        return REASONS["gqa"]
    return REASONS["rotary"]


@contextmanager
def out_of_trace(blocks):
    """The blocks' outputs detached while torch-pruning traces the model: the graph it builds
    follows autograd, so their inner ops (and their projections) are left out of it, and the
    residual stream they add to is still there, coupled to the embeddings that keep it whole."""

    def cut(module, args, out):
        return (out[0].detach(), *out[1:]) if isinstance(out, tuple) else out.detach()

    hooks = [b.register_forward_hook(cut) for b in blocks]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


def graph_prune(
    model: nn.Module,
    amount: float,
    example: torch.Tensor,
    *,
    round_to: int | None = None,
    time_limit_s: float | None = None,
) -> nn.Module:
    """A copy of `model` with `amount` (a fraction) of the channels of every prunable group
    removed. The copy records what it left alone and why in `workbench_structure`."""
    import torch_pruning as tp

    if amount == 0 and not isinstance(amount, bool):
        amount = 0.0
    if isinstance(amount, bool) or not isinstance(amount, float) or not 0.0 <= amount < 1.0:
        raise ConfigError(
            f"amount must be a fraction in [0, 1) for structured pruning of "
            f"{type(model).__name__} with torch-pruning, got {amount!r}"
        )
    time_limit_s = GRAPH_TIME_LIMIT_S if time_limit_s is None else time_limit_s
    small = copy.deepcopy(model).eval()
    as_linear = conv1d_to_linear(small)
    names = {m: n for n, m in small.named_modules()}
    reasons: dict[str, str] = {}
    ignored: list = []
    head = output_layer(small, example)
    modules = dict(small.named_modules())
    if head is not None:
        ignored.append(modules[head])
        reasons[head] = REASONS["head"]
    for name, m in modules.items():
        if kind_of(m) == "embedding":
            ignored.append(m)
            reasons[name] = REASONS["embedding"]
    for name, p in _bare_params(small).items():
        ignored.append(p)
        reasons[name.rpartition(".")[0]] = REASONS["parameter"]
    blocks = attention_blocks(small)
    for name, block in blocks.items():
        ignored.append(block)
        for inner, m in block.named_modules():
            if isinstance(m, ROOTS):
                reasons[f"{name}.{inner}"] = attention_reason(block)
    sizes = {n: sum(p.numel() for p in m.parameters()) for n, m in modules.items()}
    heads = {m: m.num_heads for m in small.modules() if isinstance(m, nn.MultiheadAttention)}
    search = Search(f"structured pruning of {type(model).__name__}", time_limit_s)
    try:
        with warnings.catch_warnings(), out_of_trace(blocks.values()), search.bounded():
            warnings.simplefilter("ignore")  # its notes on unwrapped parameters: handled above
            search.at("tracing its forward")
            graph = tp.DependencyGraph().build_dependency(
                small, example_inputs=example, output_transform=logits_of
            )
            group_of = graph.get_pruning_group

            def named(module, *args):  # the group search names the layer it starts from
                name = names.get(module, type(module).__name__)
                search.at(f"searching the layers coupled to {name}")
                return group_of(module, *args)

            graph.get_pruning_group = named
            layers = [sub for m in ignored if isinstance(m, nn.Module) for sub in m.modules()]
            for group in graph.get_all_groups(ignored_layers=layers, root_module_types=ROOTS):
                if _splits_heads(group):
                    root = group[0][0].target.module
                    ignored.append(root)
                    reasons[names[root]] = REASONS["heads"]
            search.at("pruning the groups (torch-pruning traces and groups the model again)")
            pruner = tp.pruner.BasePruner(
                small,
                example,
                importance=tp.importance.MagnitudeImportance(p=2),
                pruning_ratio=amount,
                ignored_layers=ignored,
                num_heads=heads,
                round_to=round_to,
                output_transform=logits_of,
            )
            pruner.step()
        _check_runs(model, small, example)
    except ConfigError:
        raise
    except SearchTimeout as stuck:
        raise ConfigError(
            f"structured pruning of {type(model).__name__}: torch-pruning's search "
            f"of its dependency graph did not end within {time_limit_s:g} s, "
            f"stopped while {stuck}; unstructured pruning (masks) and int8 still "
            "apply to this model"
        ) from None
    except Exception as e:
        raise ConfigError(
            f"structured pruning of {type(model).__name__} with torch-pruning "
            f"failed: {type(e).__name__}: {e}; unstructured pruning (masks) and int8 "
            "still apply to this model"
        ) from e
    for name, m in small.named_modules():  # kept whole because a group it belongs to was
        if (
            kind_of(m) in ("linear", "conv", "attention")
            and name not in reasons
            and sum(p.numel() for p in m.parameters()) == sizes.get(name)
        ):
            reasons[name] = REASONS["coupled"]
    notes = (
        [f"{len(as_linear)} Hugging Face Conv1D layers run as the nn.Linear they are"] if as_linear else []
    )
    small.workbench_structure = {"tool": "torch-pruning", "left": reasons, "notes": notes}
    return small


@torch.no_grad()
def _check_runs(model: nn.Module, small: nn.Module, example: torch.Tensor) -> None:
    """The pruned copy must run on two batch sizes and give the model's output shapes."""
    for x in (example, torch.cat([example, example[:1]])):
        want = tuple(logits_of(model.eval()(x)).shape)
        try:
            got = tuple(logits_of(small(x)).shape)
        except Exception as e:
            raise ConfigError(
                f"structured pruning of {type(model).__name__}: the pruned model no "
                f"longer runs ({type(e).__name__}: {e}); refused. The model's "
                "forward relies on sizes a trace cannot see"
            ) from e
        if got != want:
            raise ConfigError(
                f"structured pruning of {type(model).__name__}: the pruned model "
                f"returns {got} instead of {want}; refused"
            )
