"""Activation checkpointing (`train.checkpoint`): the named modules keep only their inputs in the
forward pass and run their forward again in backward, trading compute for activation memory.

    names = apply_checkpointing(model, ["blocks.layers.*"])   # ['blocks.layers.0', 'blocks.layers.1']

A name is a module's dotted name in `model.named_modules()`; a '*' stands for one whole part
("blocks.layers.*" is every layer of the transformer's stack, not their insides). Every name must
match, and no match may sit inside another; an error lists the modules that exist. The recompute is
torch.utils.checkpoint's non-reentrant one, which replays the RNG, so the losses stay the same.
"""

from __future__ import annotations

import fnmatch

import torch
from torch.utils.checkpoint import checkpoint

from ..config import ConfigError

SHOWN = 24  # modules listed in an error; the rest are counted


def _matches(pattern: str, name: str) -> bool:
    parts, want = name.split("."), pattern.split(".")
    return len(parts) == len(want) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(parts, want))


def module_names(model: torch.nn.Module) -> list[str]:
    return [n for n, _ in model.named_modules() if n]


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN])
    return shown + (f", ... ({len(names) - SHOWN} more)" if len(names) > SHOWN else "")


def resolve(model: torch.nn.Module, patterns: list[str], field: str = "train.checkpoint") -> list[str]:
    """The module names the patterns select, in model order; ConfigError naming the field when a
    pattern matches nothing or one match sits inside another."""
    names = module_names(model)
    chosen: list[str] = []
    for i, pattern in enumerate(patterns):
        found = [n for n in names if _matches(pattern, n)]
        if not found:
            raise ConfigError(
                f"{field}[{i}] {pattern!r} names no module of this model "
                f"({type(model).__name__}); its modules: {_listing(names)}"
            )
        chosen += [n for n in found if n not in chosen]
    for outer in chosen:
        inner = next((n for n in chosen if n.startswith(outer + ".")), None)
        if inner:
            raise ConfigError(
                f"{field} selects {inner!r} inside {outer!r}; checkpoint one or the other, not both"
            )
    return [n for n in names if n in chosen]


def _checkpointed(forward):
    def run(*args, **kwargs):
        if not torch.is_grad_enabled():  # evaluation keeps nothing for backward anyway
            return forward(*args, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    run.checkpointed = True
    return run


def apply_checkpointing(model: torch.nn.Module, patterns: list[str]) -> list[str]:
    """Checkpoint the selected modules of `model` in place; returns their names ([] when off)."""
    if not patterns:
        return []
    chosen = resolve(model, patterns)
    modules = dict(model.named_modules())
    for name in chosen:
        module = modules[name]
        if not getattr(module.forward, "checkpointed", False):
            module.forward = _checkpointed(module.forward)
    return chosen


def suggested(model_name: str) -> list[str]:
    """What to checkpoint in a built-in model: the transformer's layers; others name their own."""
    return ["blocks.layers.*"] if model_name == "transformer" else []
