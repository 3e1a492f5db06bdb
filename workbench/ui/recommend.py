"""Which precision to use on this device, and why (the panel's recommendation line).

    recommend_precision(torch.device("cpu"))  # -> ("bf16", "this CPU has AMX bf16 tiles ...")
"""
from __future__ import annotations

from pathlib import Path

import torch


def cpu_flags(path: str = "/proc/cpuinfo") -> set[str]:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def recommend_precision(device: torch.device, flags: set[str] | None = None) -> tuple[str, str]:
    """(dtype, reason): bf16 where the hardware does it natively, else what works best."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        name = torch.cuda.get_device_name(device)
        if torch.cuda.is_bf16_supported():
            return "bf16", (f"{name} (compute capability {major}.{minor}) runs bf16 on its tensor "
                            "cores: fp16's speed with fp32's range, so no loss scaling is needed")
        return "fp16", (f"{name} (compute capability {major}.{minor}) has no bf16; fp16 tensor cores "
                        "with a gradient scaler are the fast path")
    flags = cpu_flags() if flags is None else flags
    if "amx_bf16" in flags:
        return "bf16", ("this CPU has AMX bf16 tiles: bf16 matrix work runs several times faster "
                        "than fp32; CPUs have no fast fp16 units, so fp16 is slower here")
    if "avx512_bf16" in flags:
        return "bf16", ("this CPU has AVX512-BF16 instructions for bf16 dot products; "
                        "fp16 has no such units on a CPU")
    return "fp32", ("this CPU has no bf16 or fp16 matrix instructions: autocast would only add "
                    "conversions, so fp32 is the fastest here")
