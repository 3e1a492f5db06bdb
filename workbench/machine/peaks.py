"""Peak throughput of a device for a dtype, from three sources, each said by name:

- "measured": the ceiling `workbench hw --bench` measured on this device, cached in
  ~/.cache/workbench/ceilings/ ($WORKBENCH_CACHE overrides the folder), a file per set of
  conditions (device and threads, instruction sets, torch, busy or quiet);
- "spec": the GPU's spec sheet (workbench.machine.gpus);
- "estimate": a CPU's peak from its instruction sets, clock and threads (vendors publish no
  per-dtype CPU peaks; the estimate assumes two vector FMA units per core, one AMX unit).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from ..cache import PRIVATE, cache_dir
from ..config import ConfigError
from ..disk import disk_message, make_dirs, write_json_atomic
from .conditions import cache_name, conditions
from .contention import is_busy
from .cpu import cpu_info
from .gpus import find_gpu

# FLOPs (int8: ops) per cycle per core, by the best instruction set present, best first.
_CPU_RATES = {
    "fp32": [("avx512f", 64), ("fma", 32), (None, 8)],
    "bf16": [("amx_bf16", 1024), ("avx512_bf16", 128)],
    "fp16": [("amx_fp16", 1024), ("avx512_fp16", 128)],
    "int8": [("amx_int8", 2048), ("avx512_vnni", 256), ("avx_vnni", 128), ("avx2", 64)],
}


CEILINGS = "ceilings/ceilings"  # their cache files, one per set of conditions (quiet or busy among them)


def cache_file(conds: dict) -> Path:
    """The cache file of the ceilings measured under `conds` (machine.conditions.conditions)."""
    return cache_dir() / cache_name(CEILINGS, conds)


def save_ceilings(ceilings, device, path: Path | None = None) -> Path:
    """Remember measured ceilings (workbench.hardware.ceiling.Ceiling) for this device, under the
    conditions they met: busy when other programs held the cores during any of them. Within one
    set of conditions the highest figure seen is kept, since load only ever lowers a ceiling; a
    busy figure goes to a file of its own and never replaces a quiet one. A cache that cannot be
    written is a ConfigError naming the path and the cause."""
    other = max((c.other_cores for c in ceilings if c.other_cores is not None), default=0.0)
    busy = is_busy(other)
    conds = conditions(device, busy)
    path = path or cache_file(conds)
    old = _read(path) or {}
    entry = {
        "conditions": conds,
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "measured_t": time.time(),  # which of two entries is the newer, to the second and below
        "torch": torch.__version__,
        "busy": busy,
        "other_cpu_cores": round(other, 2),
        "compute_gflops": dict(old.get("compute_gflops", {})),
        "bandwidth_gbs": dict(old.get("bandwidth_gbs", {})),
    }
    for c in ceilings:
        if c.value != c.value:  # nan: not available here
            continue
        table, name = ("compute_gflops", c.dtype) if c.kind == "compute" else ("bandwidth_gbs", c.name)
        entry[table][name] = max(c.value, entry[table].get(name, 0.0))
    try:
        make_dirs(path.parent, PRIVATE)
        write_json_atomic(path, entry)
    except OSError as e:
        raise ConfigError(disk_message(path, e, "writing the ceiling cache")) from None
    return path


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def load_ceilings(device) -> dict | None:
    """The ceilings last measured on this device under this machine's conditions, quiet or beside
    other programs (then marked `busy` with the cores they held, so whoever shows it says so): the
    newest, so a page that measured its ceilings a moment ago reads those, not an older figure it
    would not name. None when neither exists."""
    found = []
    for busy in (False, True):
        conds = conditions(device, busy)
        entry = _read(cache_file(conds))
        if entry and entry.get("conditions") == conds:
            found.append(entry)
    return max(found, key=lambda e: (e.get("measured_t", 0.0), e.get("measured_at", ""))) if found else None


def measured_when(entry: dict) -> str:
    """When and how a cached ceiling was measured, for whoever shows it."""
    busy = (
        f", beside other programs holding {entry.get('other_cpu_cores', 0):.1f} cores (a busy "
        "figure, below what the device can do)"
        if entry.get("busy")
        else ""
    )
    return f"measured {entry['measured_at']}{busy}"


def cpu_peak_estimate(dtype: str, cpu: dict | None = None, threads: int | None = None) -> float | None:
    """Estimated peak TFLOP/s of `threads` cores at the reported clock, or None when unknown."""
    cpu = cpu or cpu_info()
    threads = threads or min(torch.get_num_threads(), cpu.get("usable_cpus") or 1)
    if not cpu.get("mhz"):
        return None
    rates = _CPU_RATES.get(dtype)
    if rates is None:
        return None
    flags = cpu.get("flags", {})
    per_cycle = next((r for flag, r in rates if flag is None or flags.get(flag)), None)
    if per_cycle is None:  # no native units: the math runs at the fp32 rate after conversion
        per_cycle = next(r for flag, r in _CPU_RATES["fp32"] if flag is None or flags.get(flag))
    return per_cycle * cpu["mhz"] * 1e6 * threads / 1e12


def spec_peak(device, dtype: str) -> tuple[float | None, str, str]:
    """(TFLOP/s, basis, source): the GPU's spec sheet, or the CPU estimate."""
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        spec = find_gpu(name)
        if spec is None:
            return None, "spec", f"{name} is not in the GPU table"
        return spec.peak(dtype), "spec", spec.source
    est = cpu_peak_estimate(dtype)
    return est, "estimate", "CPU estimate from instruction sets, clock and threads"


def peak_for(device, dtype: str) -> dict:
    """Every peak known for (device, dtype) and which one MFU should use: measured when cached
    ("measured busy" when only a busy measurement is)."""
    spec, basis, source = spec_peak(device, dtype)
    cached = load_ceilings(device) or {}
    measured = None
    if cached:
        g = cached["compute_gflops"].get(dtype)
        measured = g / 1e3 if g else None
    # a ceiling measured beside other programs is below the device's: said wherever MFU names it
    use = ("measured busy" if cached.get("busy") else "measured", measured) if measured else (basis, spec)
    return {
        "peak_tflops": use[1],
        "basis": use[0] if use[1] else None,
        "peak_when": measured_when(cached) if measured else "",  # which measurement: named
        "spec_tflops": spec,
        "spec_basis": basis,
        "spec_source": source,
        "measured_tflops": measured,
    }
