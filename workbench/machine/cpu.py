"""The CPU and host memory: model, logical and usable cores, clock, and the instruction sets that
decide matmul speed (parsed from /proc/cpuinfo, the one place that reads it), less those that
oneDNN, torch's CPU matmul library, is told not to use (ONEDNN_MAX_CPU_ISA): a capped CPU is
reported as what torch's matmuls run on, and the cap is named.

Every probe is a plain function returning a dict, so tests give it a fake /proc/cpuinfo.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

GIB = 2**30
# Instruction sets that decide matmul speed on x86 CPUs (names as in /proc/cpuinfo).
CPU_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "amx_fp16",
)


# ONEDNN_MAX_CPU_ISA's values, lowest first, each with the flags of CPU_FLAGS it adds (oneDNN's
# documented names; the AVX10_1 ones are the newer names of the AVX512_CORE_FP16 and AMX levels).
ISA_LEVELS = (
    ("SSE41", ()),
    ("AVX", ()),
    ("AVX2", ("avx2", "fma")),
    ("AVX2_VNNI", ("avx_vnni",)),
    ("AVX2_VNNI_2", ()),
    ("AVX512_CORE", ("avx512f",)),
    ("AVX512_CORE_VNNI", ("avx512_vnni",)),
    ("AVX512_CORE_BF16", ("avx512_bf16",)),
    ("AVX512_CORE_FP16", ("avx512_fp16",)),
    ("AVX512_CORE_AMX", ("amx_tile", "amx_bf16", "amx_int8")),
    ("AVX512_CORE_AMX_FP16", ("amx_fp16",)),
)
ISA_ALIASES = {
    "AVX10_1_512": "AVX512_CORE_FP16",
    "AVX10_1_512_AMX": "AVX512_CORE_AMX",
    "AVX10_1_512_AMX_FP16": "AVX512_CORE_AMX_FP16",
}


def isa_cap(environ=os.environ) -> tuple[str, set[str]] | None:
    """(the setting, as 'ONEDNN_MAX_CPU_ISA=AVX2', and the flags of CPU_FLAGS it allows), or None
    when it caps nothing (unset, DEFAULT, ALL, or a value oneDNN does not know, which it ignores)."""
    value = environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    level = ISA_ALIASES.get(value, value)
    names = [name for name, _ in ISA_LEVELS]
    if level not in names:
        return None
    allowed = {f for _, added in ISA_LEVELS[: names.index(level) + 1] for f in added}
    return f"ONEDNN_MAX_CPU_ISA={value}", allowed


def cap_flags(info: dict, environ=os.environ) -> dict:
    """`info` with the flags oneDNN is told not to use turned off and listed in `capped`, and
    `cap` the setting that turned them off ('' when it turned none off)."""
    cap = isa_cap(environ)
    off = [f for f, has in info["flags"].items() if has and f not in cap[1]] if cap else []
    return {
        **info,
        "flags": {f: has and f not in off for f, has in info["flags"].items()},
        "capped": off,
        "cap": cap[0] if off else "",
    }


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
    return {
        "model": fields.get("model name") or fields.get("Model") or platform.processor() or "unknown",
        "vendor": fields.get("vendor_id", ""),
        "logical_cpus": processors or None,
        "mhz": round(float(mhz), 1) if mhz else None,
        "flags": {f: f in flags for f in CPU_FLAGS},
    }


def usable_cores() -> int:
    """The cores this process may run on (its affinity), not every core of the machine."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_info(cpuinfo_path: str | Path = "/proc/cpuinfo") -> dict:
    import torch  # here, not at the top: the supervisor and a worker's first checks read the cores

    path = Path(cpuinfo_path)
    info = cap_flags(parse_cpuinfo(path.read_text(errors="replace") if path.is_file() else ""))
    info["logical_cpus"] = info["logical_cpus"] or os.cpu_count()
    info["usable_cpus"] = usable_cores()
    info["torch_threads"] = torch.get_num_threads()
    info["torch_cpu_capability"] = safe(lambda: torch.backends.cpu.get_cpu_capability())
    info["arch"] = platform.machine()
    return info


def isa_text(info: dict) -> str:
    """The instruction sets torch's matmuls may use, then the ones a cap turned off and by what."""
    text = ", ".join(f for f, on in info["flags"].items() if on) or "none of note"
    if info.get("capped"):
        text += f" (not used: {', '.join(info['capped'])}, by {info['cap']})"
    return text


def flags_owner(environ=os.environ) -> str:
    """Whose flags a sentence speaks of: this CPU's, or this CPU's under oneDNN's cap."""
    cap = isa_cap(environ)
    return f"this CPU under {cap[0]}" if cap else "this CPU"


def cpu_flags(cpuinfo_path: str | Path = "/proc/cpuinfo") -> set[str]:
    """The instruction sets of CPU_FLAGS this CPU has and torch's matmuls may use."""
    return {f for f, on in cpu_info(cpuinfo_path)["flags"].items() if on}


def memory_info(meminfo_path: str | Path = "/proc/meminfo") -> dict:
    path = Path(meminfo_path)
    out = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                out[f"{'total' if key == 'MemTotal' else 'available'}_gib"] = round(
                    int(rest.split()[0]) * 1024 / GIB, 2
                )
    return out


def safe(fn, default=None):
    """fn(), or `default` when the probe fails (a driver or library that is not there)."""
    try:
        return fn()
    except Exception:
        return default
