"""The model contract: what each data set hands a model, what the model must give back, and what
a factory receives. Written once here (the README repeats it) and checked on one batch before the
timed loop, with errors that say what was expected and what came back.

What a batch of B samples holds (x goes into the model, y is what the loss compares against):

    data.name         x                                   y                    facts
    digits            (B, 1, 8, 8) float32 in [0, 1]       (B,) long, 0..9      in_channels=1, num_classes=10
    synthetic_images  (B, C, S, S) float32 (data.channels,  (B,) long            in_channels, num_classes
                      data.image_size)
    text              (B, T) long token ids < V (T is       (B, T) long: x       vocab_size=V, seq_len=T,
                      data.seq_len)                         shifted by one       num_classes=V
    image_folder      (B, 3, S, S) float32                 (B,) long, a class   in_channels=3, num_classes
                                                            per folder
    dataset           your samples stacked by torch's      your labels          num_classes (your `classes`
                      default_collate                      stacked              or data.num_classes), and
                                                                                in_channels for (C, H, W)

Every data set also gives `input_shape` (one sample's x shape, without B).

What the model must return: logits, (B, C) with C >= num_classes for classes, or (B, T, V) for
text (a logit per position). What else it returns is left alone by an adapter chosen on the first
batch and recorded in the run's `ready` event (`output_adapter`):
    a tensor                           used as it is
    a tuple or list                    its first element: forward returning (logits, loss)
    a mapping, or an object with       its logits: Hugging Face's model outputs
    .logits

A model that returns every position's logits only when given targets (nanoGPT returns the last
position's alone without them) needs the two-line wrapper the README shows:

    class FullLogits(nn.Module):
        def __init__(self, gpt): super().__init__(); self.gpt = gpt
        def forward(self, idx): return self.gpt(idx, targets=idx)[0]

What a factory receives: `model.kwargs`, plus any of FACTS it names as a parameter that
`model.kwargs` does not set: `def build(vocab_size, seq_len): ...` gets the text data's
vocabulary and sequence length.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping

import torch
from torch import nn

from ..config import ConfigError
from .data import DataBundle, sample_batch


class ContractError(ConfigError):
    """The model does not fit the data: the message says what was expected and what came back."""


def data_facts(data) -> dict:
    """The facts a factory may ask for by naming them, from a DataBundle."""
    shape = tuple(data.input_shape)
    facts = {"input_shape": shape, "num_classes": data.num_classes}
    if data.task == "lm":
        facts.update(vocab_size=data.num_classes, seq_len=shape[0])
    elif data.vocab_of is not None:  # token ids to classify: read only if a factory asks
        facts.update(vocab_size=data.vocab_of, seq_len=shape[0])
    elif len(shape) == 3:
        facts["in_channels"] = shape[0]
    return facts


FACTS = ("input_shape", "num_classes", "vocab_size", "seq_len", "in_channels")  # all data_facts names


def factory_kwargs(factory, kwargs: dict, facts: dict, where: str = "model.name") -> dict:
    """model.kwargs plus the facts the factory names as parameters (model.kwargs wins). A required
    parameter that is neither is refused in one line listing the facts this data gives."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        return dict(kwargs)
    asked = {
        name: facts[name]() if callable(facts[name]) else facts[name]
        for name in params
        if name in facts and name not in kwargs
    }
    for name, p in params.items():
        required = p.default is inspect.Parameter.empty and p.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        )
        if required and name not in kwargs and name not in asked:
            close = difflib.get_close_matches(name, FACTS, n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"{where}: the factory's parameter {name!r} is neither in "
                f"{where.split('.')[0]}.kwargs nor a fact of this data{hint}; the facts "
                f"it can ask for by name: {', '.join(facts)}"
            )
    return {**asked, **kwargs}


def output_adapter(out) -> str:
    """How to find the logits in what a model returned: 'tensor', 'first' or 'logits'."""
    if isinstance(out, torch.Tensor):
        return "tensor"
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return "first"
    logits = out.get("logits") if isinstance(out, Mapping) else getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return "logits"
    return "unknown"


ADAPTER_TEXT = {
    "tensor": "the tensor itself",
    "first": "the first element of the returned tuple",
    "logits": "the .logits of the returned output",
}


class TakeLogits:
    """A forward hook that replaces a model's output by its logits (a class, so a model carrying
    it can be deep-copied; its state dict is untouched)."""

    def __init__(self, kind: str):
        self.kind = kind

    def __call__(self, module, args, out):
        if self.kind == "first":
            return out[0]
        if self.kind == "logits":
            return out["logits"] if isinstance(out, Mapping) else out.logits
        return out


def attach_adapter(model: nn.Module, kind: str) -> nn.Module:
    """Make `model` return its logits from now on (once: a second call does nothing)."""
    if kind in ("first", "logits") and getattr(model, "workbench_output", "tensor") == "tensor":
        model.register_forward_hook(TakeLogits(kind))
    model.workbench_output = kind
    return model


def _forward_once(model: nn.Module, x: torch.Tensor):
    """One forward that changes nothing: eval mode, no gradients, the RNG state restored."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            return model(x)
    finally:
        model.train(was_training)


def fit_output(model: nn.Module, x: torch.Tensor) -> tuple[str, object]:
    """Run one batch, choose the adapter for what came back and attach it. Returns the adapter's
    name and the logits (or what came back, when no adapter fits)."""
    out = _forward_once(model, x)
    if getattr(model, "workbench_output", None):  # fitted before: the hook already applied
        return model.workbench_output, out
    kind = output_adapter(out)
    if kind == "unknown":
        return kind, out
    attach_adapter(model, kind)
    return kind, TakeLogits(kind)(model, (x,), out)


def _describe(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}"
    return type(t).__name__


def check_model(model: nn.Module, data: DataBundle, device: torch.device | str = "cpu") -> dict:
    """The contract check on one batch of the training split. Returns what the run records
    (`output_adapter`, `output_shape`); raises ContractError naming what was expected."""
    x, y = sample_batch(data.train, 2)
    x, y = x.to(device), y.to(device)
    what = f"{data.name} data" if data.name else "the data"
    try:
        kind, logits = fit_output(model, x)
    except Exception as e:
        raise ContractError(
            f"the model failed on one batch of {what} (x is {_describe(x)}): {type(e).__name__}: {e}"
        ) from e
    if kind == "unknown":
        raise ContractError(
            f"{what} needs logits from the model: a tensor, or a tuple, list or "
            f"output with .logits holding one; it returned {_describe(logits)}"
        )
    _check_shape(logits, x, y, data, what)
    return {"output_adapter": ADAPTER_TEXT[kind], "output_shape": list(logits.shape)}


def _check_shape(logits: torch.Tensor, x, y, data, what: str) -> None:
    got = tuple(logits.shape)
    b = x.shape[0]
    if not logits.is_floating_point():
        raise ContractError(f"{what} needs float logits, the model returned {_describe(logits)}")
    if data.task == "lm":
        t, v = y.shape[1], data.num_classes
        if len(got) != 3 or got[:2] != (b, t) or got[2] < v:
            hint = ""
            if len(got) == 2 or (len(got) == 3 and got[1] != t):
                hint = (
                    "; a model that returns every position only when given targets needs the "
                    "two-line wrapper FullLogits from the README"
                )
            raise ContractError(
                f"{what} needs (B, T, V) logits, here ({b}, {t}, {v}) for x "
                f"{_describe(x)}; the model returned {_letters(got, 'lm')} = "
                f"{got}{hint}"
            )
        return
    c = max(data.num_classes, int(y.max()) + 1 if y.numel() and not y.is_floating_point() else 0)
    if y.dim() == 1 and (len(got) != 2 or got[0] != b or got[1] < c):
        raise ContractError(
            f"{what} needs (B, C) logits, here ({b}, {c}) for x {_describe(x)} "
            f"and {c} classes; the model returned {_letters(got, 'classify')} = "
            f"{got}"
        )


def _letters(shape: tuple, task: str) -> str:
    """(B, V), (B, T, V), (B, C): how the contract names a shape of this many dimensions."""
    names = {1: "(B,)", 2: "(B, V)" if task == "lm" else "(B, C)", 3: "(B, T, V)", 4: "(B, C, H, W)"}
    return names.get(len(shape), f"a {len(shape)}-dimensional tensor")
