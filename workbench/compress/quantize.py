"""Post-training quantization of Linear layers (and Hugging Face's Conv1D, converted as the Linear
it is): dynamic int8 (int8 weights, activations quantized
per batch) and weight-only int8, through torchao or `torch.ao.quantization`; 2:4 semi-structured
sparsity on a GPU that has sparse tensor cores.

    from workbench.compress.quantize import quantize
    qmodel, info = quantize(model, "dynamic_int8")   # info: backend, converted, skipped, notes

A conversion that touches no module is an error, never a silent no-op; `info["coverage"]` says
which layers were converted, which stayed float and why (convolutions, embeddings, attention's
fused projections), and the share of the model's weights that became int8. Backend "auto": on a CPU,
dynamic int8 uses `torch.ao` (fbgemm/oneDNN kernels, x86's int8 path; torchao's eager int8 path
is written for GPUs; whether either beats fp32 on this machine is what the compression lab
measures); on a GPU torchao. Weight-only int8 needs
torchao and is refused with that reason without it. `torch.ao.quantization` is deprecated: its
warnings are filtered (`quiet.py`) and the record's notes say it once instead.
"""

from __future__ import annotations

import copy
import functools
import importlib.util

import torch
from torch import nn

from ..config import ConfigError
from . import quiet
from .coverage import coverage
from .layers import conv1d_to_linear, kind_of, shared_groups, tensor_of
from .unstructured import check_not_quantized, has_masks

METHODS = ("dynamic_int8", "weight_only_int8", "semi_structured_2_4")
BACKENDS = ("auto", "torchao", "torch.ao")
DEPRECATION_NOTE = (
    "torch.ao.quantization is deprecated (its warnings are filtered, this note "
    "says it); it is used here because its CPU int8 kernels are the fast ones on "
    "this torch"
)


@functools.lru_cache(maxsize=1)
def torchao_available() -> bool:
    """Installed and importable with this torch (an incompatible build fails at import)."""
    if importlib.util.find_spec("torchao") is None:
        return False
    try:
        with quiet.torchao_import():
            import torchao.quantization  # noqa: F401
    except Exception:
        return False
    return True


def unsupported_reason(method: str, device: torch.device | str = "cpu", backend: str = "auto") -> str | None:
    """Why `method` cannot run on `device` with `backend`, or None. Widgets grey out on this."""
    device = torch.device(device)
    if method == "semi_structured_2_4":
        if device.type != "cuda":
            return (
                "2:4 semi-structured sparsity runs on sparse tensor cores of NVIDIA GPUs "
                "(compute capability 8.0+); this is a CPU"
            )
        major, minor = torch.cuda.get_device_capability(device)
        if major < 8:
            return f"2:4 sparsity needs compute capability 8.0+, this GPU is {major}.{minor}"
    if (backend == "torchao" or method == "weight_only_int8") and not torchao_available():
        return "torchao is not installed (pip install torchao)"
    if backend == "torch.ao" and method == "dynamic_int8" and device.type == "cuda":
        return "torch.ao dynamic quantization runs on the CPU only; use backend torchao"
    return None


def pick_backend(method: str, device: torch.device, backend: str) -> str:
    if backend != "auto":
        return backend
    if method == "dynamic_int8":
        return "torch.ao" if device.type == "cpu" or not torchao_available() else "torchao"
    if method == "weight_only_int8":
        return "torchao"
    return "torch.sparse"


def _linears(model: nn.Module) -> list[str]:
    """Layers int8 kernels can take: Linear, and Hugging Face's Conv1D (a transposed Linear)."""
    return [n for n, m in model.named_modules() if kind_of(m) in ("linear", "hf_conv1d")]


def _left_reasons(model: nn.Module, backend: str, converted: list[str]) -> dict[str, str]:
    """Why each layer that int8 could concern stayed float."""
    reasons = {}
    modules = dict(model.named_modules())
    held = {id(tensor_of(modules[n], "weight")): n for n in converted}
    for name, m in modules.items():
        kind = kind_of(m)
        tied = held.get(id(m._parameters.get("weight")))
        if tied and tied != name:
            reasons[name] = (
                f"shares its weight with {tied}, which is int8 now: this layer keeps the float copy"
            )
        elif kind == "conv":
            reasons[name] = (
                "a convolution: dynamic and weight-only int8 convert Linear layers; "
                "int8 convolutions need static quantization with calibration data, "
                "which this lab does not do"
            )
        elif kind == "attention":
            reasons[name] = (
                "q, k and v fused in one bare parameter of nn.MultiheadAttention: "
                "int8 kernels take Linear layers"
            )
        elif kind in ("linear", "hf_conv1d") and name not in converted:
            special = type(m).__name__ == "NonDynamicallyQuantizableLinear"
            reasons[name] = (
                "attention's output projection (NonDynamicallyQuantizableLinear): "
                f"{backend} keeps it in float"
                if special
                else f"{backend} left this layer in float"
            )
    return reasons


def _converted(model: nn.Module) -> list[str]:
    out = []
    for n, m in model.named_modules():
        if isinstance(m, torch.ao.nn.quantized.dynamic.Linear):
            out.append(n)
        elif isinstance(m, nn.Linear) and type(m.weight) not in (torch.Tensor, nn.Parameter):
            out.append(n)  # torchao int8 tensor or a 2:4 sparse tensor
    return out


def quantize(
    model: nn.Module,
    method: str = "dynamic_int8",
    *,
    backend: str = "auto",
    device: torch.device | str = "cpu",
) -> tuple[nn.Module, dict]:
    """A quantized copy of `model` (the input is untouched) and a record of what was done."""
    if method not in METHODS:
        raise ConfigError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    check_not_quantized(model, "quantize")
    if has_masks(model):
        raise ConfigError("quantize: the model still carries pruning masks; call make_real first")
    device = torch.device(device)
    reason = unsupported_reason(method, device, backend)
    if reason:
        raise ConfigError(f"method {method!r} cannot run here: {reason}")
    before = _linears(model)
    if not before:
        raise ConfigError(
            f"model {type(model).__name__} has no nn.Linear layer; nothing to "
            "quantize (these methods convert Linear and Hugging Face Conv1D layers)"
        )
    chosen = pick_backend(method, device, backend)
    q = copy.deepcopy(model).eval().to(device)
    notes: list[str] = []
    as_linear = conv1d_to_linear(q)
    if as_linear:
        notes.append(
            f"{len(as_linear)} Hugging Face Conv1D layers converted as the nn.Linear they "
            "are (weight transposed)"
        )
    if any(isinstance(m, nn.MultiheadAttention) for m in q.modules()):
        # The quantized encoder crashes on attention's fused fast path; this flag is global.
        torch.backends.mha.set_fastpath_enabled(False)
        notes.append("attention fast path disabled (torch.backends.mha) so the quantized encoder runs")
    if chosen == "torch.ao":
        notes.append(DEPRECATION_NOTE)
        with quiet.torch_ao_quantization():
            q = torch.ao.quantization.quantize_dynamic(q, {nn.Linear}, dtype=torch.qint8)
    elif chosen == "torchao":
        from torchao.quantization import (
            Int8DynamicActivationInt8WeightConfig,
            Int8WeightOnlyConfig,
            quantize_,
        )

        config = (
            Int8DynamicActivationInt8WeightConfig() if method == "dynamic_int8" else Int8WeightOnlyConfig()
        )
        quantize_(q, config)
    else:  # 2:4 semi-structured, GPU only (checked above)
        from torch.sparse import to_sparse_semi_structured

        q = q.half()
        for m in q.modules():
            if type(m) is nn.Linear:
                w = m.weight.detach()
                mask = torch.zeros_like(w, dtype=torch.bool)
                top = w.abs().reshape(-1, 4).topk(2, dim=1).indices  # keep 2 largest of every 4
                mask.reshape(-1, 4).scatter_(1, top, True)
                m.weight = nn.Parameter(to_sparse_semi_structured(w * mask), requires_grad=False)
    converted = _converted(q)
    if not converted:
        raise ConfigError(
            f"quantize: {method} with backend {chosen} converted 0 of {len(before)} "
            f"Linear layers ({', '.join(before[:5])}); nothing was quantized"
        )
    skipped = [n for n in before if n not in converted]
    if skipped:
        notes.append(f"left in float: {', '.join(skipped[:6])}" + (" ..." if len(skipped) > 6 else ""))
    q._workbench_quantized = True
    # its parameters as the float model counted them: packed int8 weights are not parameters, and a
    # table that fell back to the dense model's count said a pruned-then-quantized model had them all
    q._workbench_params = sum(p.numel() for p in model.parameters())
    modules = dict(model.named_modules())
    touched = {}
    for group in shared_groups([(n, modules[n], "weight") for n in converted]):
        touched[group[0][0]] = tensor_of(modules[group[0][0]], "weight").numel()
    cov = coverage(model, touched, _left_reasons(model, chosen, converted))
    info = {
        "method": method,
        "backend": chosen,
        "converted": len(converted),
        "linear_layers": len(before),
        "conv1d_as_linear": len(as_linear),
        "skipped": skipped,
        "notes": notes,
        "coverage": cov,
    }
    return q, info
