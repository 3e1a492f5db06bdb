"""What a device can run: the one place that answers "does this device do bf16 / fp16 / TF32 /
channels_last", asked by the precision checks, the hardware report, the recommendation line and the
controls. Plain torch only warns when, say, bf16 autocast is asked of a GPU without bf16, then
silently runs fp32; the workbench refuses instead.

    resolve_device("auto"); unsupported_reason(cfg, device, "bf16")
"""

from __future__ import annotations

import torch

from ..config import ConfigError, RunConfig
from .gpu import gpu_dtypes

OPTIONS = ("bf16", "fp16", "tf32", "channels_last")
NO_IMAGE_TENSORS = "channels_last only changes image (4-D) tensors; this model has none"


def resolve_device(requested: str) -> torch.device:
    """'auto' means the GPU when there is one. Asking for 'cuda' without one is an error."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "run.device must be 'cpu' or 'auto' on this machine, got 'cuda': "
            "torch sees no CUDA GPU (torch.cuda.is_available() is False)"
        )
    return torch.device(requested)


def gpu_has(dtype: str, device: torch.device) -> bool:
    """Tensor-core support for `dtype` on this GPU, by its compute capability."""
    return gpu_dtypes(*torch.cuda.get_device_capability(device)).get(dtype, False)


def unsupported_reason(cfg: RunConfig, device: torch.device, option: str) -> str | None:
    """Why `option` ('fp16', 'bf16', 'tf32', 'channels_last', 'fused_optimizer') cannot run here,
    or None.

    The widgets grey out choices with it; the precision checks refuse a config with it."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if option == "bf16" and not gpu_has("bf16", device):
            return f"this GPU (compute capability {major}.{minor}) has no bf16; use fp16 with a scaler"
        if option == "fp16" and (major, minor) < (5, 3):
            return f"this GPU (compute capability {major}.{minor}) has no fast fp16"
        if option == "tf32" and not gpu_has("tf32", device):
            return f"TF32 needs compute capability 8.0 (Ampere) or newer, this GPU is {major}.{minor}"
    elif device.type == "cpu":
        if option == "tf32":
            return "TF32 is a CUDA tensor-core mode (Ampere or newer); this run is on the CPU"
    if option == "fused_optimizer":
        return fused_optimizer_reason(cfg.optim.name, device)
    if option == "channels_last" and cfg.model.name not in ("cnn",) and ":" not in cfg.model.name:
        return NO_IMAGE_TENSORS
    return None


def fused_optimizer_reason(optimizer: str, device: torch.device) -> str | None:
    """Why torch has no fused `optimizer` step ('adamw', 'sgd') on this device, or None. Torch's own
    list of devices with fused kernels is asked, not a tensor made (that would start CUDA here)."""
    try:
        from torch.optim.optimizer import _get_fused_kernels_supported_devices

        devices = _get_fused_kernels_supported_devices()
    except ImportError:  # a torch without the list: let the optimizer itself refuse at setup
        return None
    if device.type not in devices:
        return (
            f"torch {torch.__version__} has fused {optimizer} kernels only on "
            f"{', '.join(devices)}, not on {device.type}; use optim.impl 'foreach' or 'for-loop'"
        )
    return None
