"""What this machine is: CPU model, cores and instruction sets, memory, the torch build, and per GPU
its name, compute capability, SMs, memory, dtypes, driver and link topology.

    python -m workbench.cli hw --json

Every probe is a plain function returning a dict, so tests fake the device queries
(torch.cuda.*, a fake `pynvml` module, a fake /proc/cpuinfo) and check the report built from them.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

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


def cpu_info(cpuinfo_path: str | Path = "/proc/cpuinfo") -> dict:
    path = Path(cpuinfo_path)
    info = parse_cpuinfo(path.read_text(errors="replace")) if path.is_file() else parse_cpuinfo("")
    info["logical_cpus"] = info["logical_cpus"] or os.cpu_count()
    try:
        info["usable_cpus"] = len(os.sched_getaffinity(0))  # what this process may run on
    except AttributeError:
        info["usable_cpus"] = os.cpu_count()
    info["torch_threads"] = torch.get_num_threads()
    info["torch_cpu_capability"] = _safe(lambda: torch.backends.cpu.get_cpu_capability())
    info["arch"] = platform.machine()
    return info


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


def _safe(fn, default=None):
    try:
        return fn()
    except Exception:
        return default


def torch_build() -> dict:
    """Which torch this is and which vendor libraries it was built with."""
    return {"torch": torch.__version__, "cuda": torch.version.cuda,
            "hip": getattr(torch.version, "hip", None),
            "cudnn": _safe(lambda: torch.backends.cudnn.version()),
            "onednn": torch.backends.mkldnn.is_available(),
            "mkl": _safe(lambda: torch.backends.mkl.is_available(), False),
            "openmp": _safe(lambda: torch.backends.openmp.is_available(), False)}


def gpu_dtypes(major: int, minor: int) -> dict:
    """Which dtypes have tensor-core support at this compute capability."""
    cc = (major, minor)
    return {"fp16": cc >= (7, 0), "bf16": cc >= (8, 0), "tf32": cc >= (8, 0),
            "int8": cc >= (7, 2), "fp8": cc >= (8, 9)}


def _nvml():
    """The pynvml module, initialised, or None (not installed, no driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def gpu_info() -> dict:
    """Per-GPU facts and the links between them. `{"count": 0, "gpus": []}` without a GPU."""
    if not torch.cuda.is_available():
        return {"count": 0, "gpus": [], "links": []}
    count = torch.cuda.device_count()
    nv = _nvml()
    gpus, handles = [], []
    for i in range(count):
        props = torch.cuda.get_device_properties(i)
        major, minor = torch.cuda.get_device_capability(i)
        g = {"index": i, "name": props.name, "capability": f"{major}.{minor}",
             "sms": props.multi_processor_count, "memory_gib": round(props.total_memory / GIB, 2),
             "dtypes": gpu_dtypes(major, minor)}
        h = _safe(lambda: nv.nvmlDeviceGetHandleByIndex(i)) if nv else None
        handles.append(h)
        if h is not None:
            g["max_sm_clock_mhz"] = _safe(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))
            g["pcie_gen"] = _safe(lambda: nv.nvmlDeviceGetMaxPcieLinkGeneration(h))
            g["pcie_width"] = _safe(lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(h))
            g["power_limit_w"] = _safe(lambda: nv.nvmlDeviceGetPowerManagementLimit(h) / 1000)
        gpus.append(g)
    out = {"count": count, "gpus": gpus, "cuda_runtime": torch.version.cuda,
           "driver": _safe(lambda: _text(nv.nvmlSystemGetDriverVersion())) if nv else None,
           "driver_cuda": _safe(lambda: _cuda_version(nv.nvmlSystemGetCudaDriverVersion())) if nv else None,
           "links": [link(i, j, nv, handles) for i in range(count) for j in range(i + 1, count)]}
    return out


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


_TOPOLOGY = {0: "same board", 10: "PCIe switch (single)", 20: "PCIe switches (multiple)",
             30: "PCIe host bridge", 40: "same NUMA node (CPU)", 50: "across CPUs (system)"}


def link(i: int, j: int, nv, handles) -> dict:
    """How GPUs i and j talk: NVLink or the PCIe path between them, and whether peer access works."""
    out = {"a": i, "b": j, "peer_access": bool(_safe(lambda: torch.cuda.can_device_access_peer(i, j), False)),
           "kind": "unknown"}
    hi, hj = handles[i], handles[j]
    if nv is None or hi is None or hj is None:
        return out
    nvlink = _safe(lambda: nv.nvmlDeviceGetP2PStatus(hi, hj, nv.NVML_P2P_CAPS_INDEX_NVLINK))
    if nvlink == nv.NVML_P2P_STATUS_OK:
        out["kind"] = "NVLink"
    else:
        level = _safe(lambda: nv.nvmlDeviceGetTopologyCommonAncestor(hi, hj))
        out["kind"] = "PCIe" + (f" via {_TOPOLOGY.get(level, level)}" if level is not None else "")
    return out


def hardware_report() -> dict:
    """The whole report as plain data (JSON-ready)."""
    return {"host": platform.node(), "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), "cpu": cpu_info(), "memory": memory_info(),
            "torch": torch_build(), "gpu": gpu_info()}


def format_report(rep: dict) -> str:
    """The report as aligned text for a terminal."""
    c, m, t, g = rep["cpu"], rep["memory"], rep["torch"], rep["gpu"]
    flags = ", ".join(f for f, on in c["flags"].items() if on) or "none of note"
    lines = [f"CPU      {c['model']} ({c['arch']}), {c['logical_cpus']} logical CPUs, "
             f"{c['usable_cpus']} usable, torch uses {c['torch_threads']} threads",
             f"         instruction sets: {flags}; torch kernels: {c['torch_cpu_capability']}",
             f"Memory   {m.get('total_gib', '?')} GiB total, {m.get('available_gib', '?')} GiB available",
             f"torch    {t['torch']}, CUDA {t['cuda'] or 'none'}, cuDNN {t['cudnn'] or 'none'}, "
             f"oneDNN {'yes' if t['onednn'] else 'no'}, MKL {'yes' if t['mkl'] else 'no'}"]
    if not g["count"]:
        lines.append("GPU      none (torch.cuda.is_available() is False)")
    else:
        lines.append(f"GPU      {g['count']} device(s), driver {g.get('driver') or '?'} "
                     f"(CUDA {g.get('driver_cuda') or '?'}), torch's CUDA runtime {g.get('cuda_runtime')}")
        for d in g["gpus"]:
            dts = ", ".join(k for k, on in d["dtypes"].items() if on)
            lines.append(f"  [{d['index']}] {d['name']}: capability {d['capability']}, {d['sms']} SMs, "
                         f"{d['memory_gib']} GiB; tensor-core dtypes: {dts}")
        for lk in g["links"]:
            lines.append(f"  GPU{lk['a']} <-> GPU{lk['b']}: {lk['kind']}, "
                         f"peer access {'yes' if lk['peer_access'] else 'no'}")
    return "\n".join(lines)
