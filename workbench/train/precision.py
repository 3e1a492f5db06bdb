"""Mixed precision in three pieces (a dtype map, autocast or nullcontext, a scaler for fp16 only),
and the check that refuses a config asking for what the device cannot do, before a run starts
(what a device can do is `workbench.machine.capability`'s answer).
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from ..config import ConfigError, RunConfig
from ..machine.fit import device_refusal

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}  # the one map, per Precision


def check_supported(cfg: RunConfig, device: torch.device) -> None:
    """Raise ConfigError naming the field when the config asks for what the device cannot do."""
    reason = device_refusal(cfg, device)
    if reason:
        raise ConfigError(reason)


def autocast(cfg, device: torch.device):
    """The forward-pass context: autocast to the chosen dtype, or nothing for fp32."""
    dtype = DTYPES[cfg.precision.dtype]
    if dtype is torch.float32:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(cfg, device: torch.device) -> torch.amp.GradScaler:
    """Loss scaling guards fp16's narrow range; bf16 has fp32's range and needs none."""
    return torch.amp.GradScaler(device.type, enabled=cfg.precision.dtype == "fp16")


def apply_backend_flags(cfg, device: torch.device) -> None:
    """TF32 matmuls and convolutions on Ampere+ GPUs (set per process, so per run)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = cfg.precision.tf32
        torch.backends.cudnn.allow_tf32 = cfg.precision.tf32
