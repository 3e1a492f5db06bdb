"""What a server serves: a model in one variant, and the input it takes, derived from the model's
data (its shape, dtype and, for token inputs, the vocabulary), so a request that does not fit is
refused in one line before it reaches the model.

    served = build_served(subject, "int8")
    x = served.read({"inputs": [[...], [...]]})    # a tensor, or BadRequest naming what was wrong
    outputs = served.forward(x)
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..config import ConfigError
from .bounds import MAX_SAMPLES, PRUNE_AMOUNT, VARIANTS


class BadRequest(ValueError):
    """A request the server refuses: its HTTP status and one line saying what was wrong."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Served:
    model: nn.Module
    name: str
    variant: str
    input_shape: tuple
    input_dtype: torch.dtype
    task: str
    vocab: int
    note: str = ""  # what the variant did or left out, in words

    def schema(self) -> dict:
        """The input a request carries, in words a client can follow."""
        kind = "integer token ids" if self.integer_input else "numbers"
        out = {
            "inputs": f"one sample, or a list of up to {MAX_SAMPLES} samples, each of shape "
            f"{list(self.input_shape)} ({kind})",
            "shape": list(self.input_shape),
            "dtype": str(self.input_dtype).removeprefix("torch."),
        }
        if self.integer_input:
            out["vocab"] = self.vocab
        return out

    @property
    def integer_input(self) -> bool:
        return self.task == "lm" or not self.input_dtype.is_floating_point

    def read(self, body: Any) -> tuple[torch.Tensor, bool]:
        """The request's samples as one tensor, and whether it sent a single sample (answered
        without the batch dimension); BadRequest (422) naming the field, the value and what is
        allowed where it does not fit."""
        if not isinstance(body, dict) or "inputs" not in body:
            raise BadRequest(422, 'the body must be a JSON object with "inputs": ' + self.schema()["inputs"])
        inputs = body["inputs"]
        dtype = torch.long if self.integer_input else torch.float32
        try:
            x = torch.tensor(inputs, dtype=dtype)
        except RecursionError:
            raise BadRequest(422, "inputs is nested too deeply") from None
        except (TypeError, ValueError, RuntimeError, OverflowError) as e:
            raise BadRequest(
                422, f"inputs is not a rectangular array of {self._kind()}: {str(e)[:120]}"
            ) from None
        if self.integer_input and not _all_ints(inputs):
            raise BadRequest(422, f"inputs must be {self._kind()}, got non-integer values")
        single = x.dim() == len(self.input_shape)
        if single:
            x = x.unsqueeze(0)
        if tuple(x.shape[1:]) != self.input_shape or x.shape[0] == 0:
            raise BadRequest(
                422,
                f"inputs has shape {list(x.shape) if not single else list(x.shape[1:])}; this model "
                f"takes {list(self.input_shape)} or [n, {', '.join(map(str, self.input_shape))}]",
            )
        if x.shape[0] > MAX_SAMPLES:
            raise BadRequest(413, f"inputs holds {x.shape[0]} samples; at most {MAX_SAMPLES} per request")
        if self.integer_input and x.numel() and (x.min() < 0 or x.max() >= max(self.vocab, 1)):
            raise BadRequest(422, f"inputs holds token ids outside [0, {self.vocab - 1}]")
        if not self.integer_input and not torch.isfinite(x).all():
            raise BadRequest(422, "inputs holds NaN or infinite values")
        return x.to(self.input_dtype if not self.integer_input else x.dtype), single

    def _kind(self) -> str:
        return f"integers (token ids below {self.vocab})" if self.integer_input else "numbers"

    @torch.inference_mode()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.variant == "bf16" and x.is_floating_point():
            x = x.to(torch.bfloat16)
        out = self.model(x)
        return out.float()


def _all_ints(value) -> bool:
    if isinstance(value, list):
        return all(_all_ints(v) for v in value)
    return isinstance(value, int) and not isinstance(value, bool)


def variant_model(model: nn.Module, variant: str) -> nn.Module:
    """`model` as served in a plain-torch variant: eager as trained, compiled (torch.compile) or
    bf16 (a copy in bfloat16: the model given stays as it was). An exported serve.py copies it."""
    if variant == "compiled":
        return torch.compile(model)
    if variant == "bf16":
        return copy.deepcopy(model).to(torch.bfloat16)
    return model


def build_served(subject, variant: str = "eager", amount: float = PRUNE_AMOUNT) -> Served:
    """`subject` (workbench.compress.subject.Subject) in `variant`: a plain-torch one
    (variant_model); int8 (dynamic int8 Linear layers, the compression lab's quantize); pruned
    (`amount` of each hidden layer's neurons or channels removed by the compression lab's
    structured pruning, not fine-tuned here); or onnx (exported and run by ONNX Runtime). Each
    says what it converted and what it left. A compiled variant compiles here, before serving.

    :param subject: the model to serve, with its input's shape, dtype, task and vocabulary.
    :param variant: "eager", "compiled", "bf16", "int8", "pruned" or "onnx"; anything else is a ConfigError.
    :param amount: the share (0 to 1) of each hidden layer's neurons or channels that the pruned variant
        removes; the other variants ignore it.
    """
    if variant not in VARIANTS:
        raise ConfigError(f"--variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    model, note = subject.model.eval(), ""
    if variant == "int8":
        from ..compress.coverage import coverage_note
        from ..compress.quantize import quantize

        model, info = quantize(model, "dynamic_int8")
        note = coverage_note(info["coverage"], "int8 (dynamic) converted")
    elif variant == "pruned":
        from ..compress.coverage import coverage_note
        from ..compress.structured import structured_coverage, structured_prune

        small = structured_prune(model, amount, example=subject.example(2)).eval()
        note = (
            coverage_note(
                structured_coverage(model, small),
                f"structured pruning ({amount:.0%} of each hidden layer's units removed) shrank",
            )
            + "; not fine-tuned, so its answers differ from the trained model's (`workbench prune` "
            "fine-tunes and measures the accuracy kept)"
        )
        model = small
    elif variant == "onnx":
        from .onnx_runtime import onnx_model

        model, note = onnx_model(model, subject.example(2), MAX_SAMPLES)
    else:
        model = variant_model(model, variant)
    served = Served(
        model,
        subject.name,
        variant,
        tuple(subject.input_shape),
        subject.input_dtype,
        subject.task,
        subject.vocab,
        note,
    )
    served.forward(subject.example(2))
    return served
