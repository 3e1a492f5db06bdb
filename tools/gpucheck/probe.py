"""Is there a GPU to check? Answered from the device nodes and the driver's /proc entry before torch
is imported (importing torch alone takes seconds), then by torch itself. Stdlib only.

    reason = no_gpu_reason() or torch_reason()   # None: go ahead
"""

from __future__ import annotations

import importlib.util
import sys
from importlib import metadata
from pathlib import Path

# What the check uses besides torch, by distribution name: reported in every report, found or not.
PACKAGES = ("torch", "numpy", "psutil", "nvidia-ml-py", "pillow", "torchao", "scikit-learn")
REQUIRED = {"numpy": "numpy", "psutil": "psutil"}  # module -> distribution; torch is asked first


def no_gpu_reason(dev: Path = Path("/dev"), driver: Path = Path("/proc/driver/nvidia")) -> str | None:
    """Why there is certainly no NVIDIA GPU here, or None when there may be one (then ask torch)."""
    if any(dev.glob("nvidia[0-9]*")) or (dev / "dxg").exists():  # dxg: a GPU under WSL
        return None
    gpus = driver / "gpus"
    if gpus.is_dir() and any(gpus.iterdir()):
        return None
    return (
        f"no NVIDIA GPU on this machine: no {dev}/nvidia0 device node and no {gpus} "
        "(the NVIDIA driver is not loaded)"
    )


def torch_reason() -> str | None:
    """Why torch cannot use a GPU here (not installed, a CPU-only build, a driver it cannot talk
    to), or None."""
    if importlib.util.find_spec("torch") is None:
        return f"torch is not installed for {sys.executable}"
    import torch

    if torch.cuda.is_available():
        return None
    if not torch.version.cuda:
        return (
            f"torch {torch.__version__} is a CPU-only build (torch.version.cuda is None); "
            "install a CUDA build of torch to check the GPU"
        )
    return (
        f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU: "
        "torch.cuda.is_available() is False (driver too old for this CUDA, or no device visible)"
    )


def missing_required() -> list[str]:
    """Distributions the check cannot run without (every part imports them), not installed here."""
    return [dist for module, dist in REQUIRED.items() if importlib.util.find_spec(module) is None]


def package_versions() -> dict:
    """Installed versions of the packages the check uses (None: not installed), without importing them."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out
