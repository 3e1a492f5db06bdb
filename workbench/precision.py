"""Mixed precision in three pieces (a dtype map, autocast or nullcontext, a scaler for fp16 only),
and the device checks that refuse what the hardware cannot do before a run starts.

Plain torch only warns when, say, bf16 autocast is asked of a GPU without bf16, then silently runs
fp32; a benchmark built on that would compare fp32 with fp32. We refuse instead.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch

from .config import ConfigError, RunConfig

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(requested: str) -> torch.device:
    """'auto' means the GPU when there is one. Asking for 'cuda' without one is an error."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("run.device must be 'cpu' or 'auto' on this machine, got 'cuda': "
                          "torch sees no CUDA GPU (torch.cuda.is_available() is False)")
    return torch.device(requested)


def unsupported_reason(cfg: RunConfig, device: torch.device, option: str) -> str | None:
    """Why `option` ('fp16', 'bf16', 'tf32', 'channels_last', 'compile') cannot run here, or None.

    The widgets use this to grey out choices; `check_supported` uses it to refuse a config.
    """
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if option == "bf16" and not torch.cuda.is_bf16_supported():
            return f"this GPU (compute capability {major}.{minor}) has no bf16; use fp16 with a scaler"
        if option == "fp16" and (major, minor) < (5, 3):
            return f"this GPU (compute capability {major}.{minor}) has no fast fp16"
        if option == "tf32" and major < 8:
            return f"TF32 needs compute capability 8.0 (Ampere) or newer, this GPU is {major}.{minor}"
    elif device.type == "cpu":
        if option == "tf32":
            return "TF32 is a CUDA tensor-core mode (Ampere or newer); this run is on the CPU"
    if option == "channels_last" and cfg.model.name not in ("cnn",) and ":" not in cfg.model.name:
        return "channels_last only changes image (4-D) tensors; this model has none"
    return None


def check_supported(cfg: RunConfig, device: torch.device) -> None:
    """Raise ConfigError naming the field when the config asks for what the device cannot do."""
    checks = [("precision.dtype", cfg.precision.dtype, cfg.precision.dtype != "fp32"),
              ("precision.tf32", "tf32", cfg.precision.tf32),
              ("precision.channels_last", "channels_last", cfg.precision.channels_last)]
    for field, option, asked in checks:
        if not asked:
            continue
        reason = unsupported_reason(cfg, device, option)
        if reason:
            value = option if field == "precision.dtype" else True
            raise ConfigError(f"{field} cannot be {value!r} on {device.type}: {reason}")


def autocast(cfg: RunConfig, device: torch.device):
    """The forward-pass context: autocast to the chosen dtype, or nothing for fp32."""
    dtype = DTYPES[cfg.precision.dtype]
    if dtype is torch.float32:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(cfg: RunConfig, device: torch.device) -> torch.amp.GradScaler:
    """Loss scaling guards fp16's narrow range; bf16 has fp32's range and needs none."""
    return torch.amp.GradScaler(device.type, enabled=cfg.precision.dtype == "fp16")


def apply_backend_flags(cfg: RunConfig, device: torch.device) -> None:
    """TF32 matmuls and convolutions on Ampere+ GPUs (set per process, so per run)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = cfg.precision.tf32
        torch.backends.cudnn.allow_tf32 = cfg.precision.tf32
