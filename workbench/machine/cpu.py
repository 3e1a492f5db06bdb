"""The CPU and host memory: model, logical and usable cores, clock, and the instruction sets that
decide matmul speed (parsed from /proc/cpuinfo, the one place that reads it).

Every probe is a plain function returning a dict, so tests give it a fake /proc/cpuinfo.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path

GIB = 2**30
# Instruction sets that decide matmul speed on x86 CPUs (names as in /proc/cpuinfo).
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni",
             "amx_tile", "amx_bf16", "amx_int8", "amx_fp16")


def parse_cpuinfo(text: str) -> dict:
    """Model name, logical CPUs, clock, vendor and the flags that matter, from /proc/cpuinfo text."""
    fields: dict[str, str] = {}
    processors = 0
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "processor":
            processors += 1
        fields.setdefault(key, value)  # the first processor speaks for all
    flags = set(fields.get("flags", fields.get("Features", "")).split())
    mhz = fields.get("cpu MHz")
    return {"model": fields.get("model name") or fields.get("Model") or platform.processor() or "unknown",
            "vendor": fields.get("vendor_id", ""),
            "logical_cpus": processors or None,
            "mhz": round(float(mhz), 1) if mhz else None,
            "flags": {f: f in flags for f in CPU_FLAGS}}


def usable_cores() -> int:
    """The cores this process may run on (its affinity), not every core of the machine."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_info(cpuinfo_path: str | Path = "/proc/cpuinfo") -> dict:
    import torch  # here, not at the top: the supervisor and a worker's first checks read the cores

    path = Path(cpuinfo_path)
    info = parse_cpuinfo(path.read_text(errors="replace")) if path.is_file() else parse_cpuinfo("")
    info["logical_cpus"] = info["logical_cpus"] or os.cpu_count()
    info["usable_cpus"] = usable_cores()
    info["torch_threads"] = torch.get_num_threads()
    info["torch_cpu_capability"] = safe(lambda: torch.backends.cpu.get_cpu_capability())
    info["arch"] = platform.machine()
    return info


def cpu_flags(cpuinfo_path: str | Path = "/proc/cpuinfo") -> set[str]:
    """The instruction sets of CPU_FLAGS this CPU has."""
    return {f for f, on in cpu_info(cpuinfo_path)["flags"].items() if on}


def memory_info(meminfo_path: str | Path = "/proc/meminfo") -> dict:
    path = Path(meminfo_path)
    out = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                out[f"{'total' if key == 'MemTotal' else 'available'}_gib"] = round(
                    int(rest.split()[0]) * 1024 / GIB, 2)
    return out


def safe(fn, default=None):
    """fn(), or `default` when the probe fails (a driver or library that is not there)."""
    try:
        return fn()
    except Exception:
        return default
