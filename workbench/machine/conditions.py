"""The conditions a measurement of this machine depends on, and the cache file it is kept under.

A figure measured here (a precision lesson, a ceiling) holds only where these hold: the device and
torch's thread count on it, the instruction sets torch may use and the cap on them, the usable
cores, torch's version, and whether other programs held the cores. Each set of conditions has a
cache file of its own, so two kernels and a CLI measuring under different conditions never
overwrite each other, and a reader finds only a figure that applies to it.
"""

from __future__ import annotations

import hashlib
import json

import torch

from .cpu import cpu_flags, cpu_info, isa_cap, usable_cores


def device_key(device) -> str:
    """Which device a figure is of: the GPU's name, or the CPU's model and torch's thread count."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda {torch.cuda.get_device_name(device)}"
    return f"cpu {cpu_info()['model']} x{torch.get_num_threads()} threads"


def conditions(device, busy: bool) -> dict:
    """What a measurement on `device` depends on; `busy`: other programs held the cores."""
    device = torch.device(device)
    return {
        "device": device_key(device),
        "torch": torch.__version__,
        "flags": sorted(cpu_flags()) if device.type == "cpu" else [],
        "isa_cap": (isa_cap() or ("",))[0],
        "usable_cores": usable_cores(),
        "busy": busy,
    }


def cache_name(kind: str, conds: dict) -> str:
    """The cache file, relative to the cache folder, of one kind of figure ("lessons/precision")
    measured under `conds`."""
    digest = hashlib.sha256(json.dumps(conds, sort_keys=True).encode()).hexdigest()[:16]
    return f"{kind}-{digest}.json"


def kept_under(kind: str, conds: dict, refresh: bool = False) -> dict | None:
    """The record of `kind` kept for exactly `conds`, or None: none kept, or a refresh asked."""
    from ..cache import read_json

    record = {} if refresh else read_json(cache_name(kind, conds))
    return record if record.get("conditions") == conds else None
