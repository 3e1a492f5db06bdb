"""The GPUs: per device its name, compute capability, SMs, memory, tensor-core dtypes, and the links
between devices; NVML, started in one place (`nvml()`).

Tests fake torch.cuda.* and a `pynvml` module and check the report built from them.
"""

from __future__ import annotations

import torch

from .cpu import safe

GIB = 2**30
_TOPOLOGY = {
    0: "same board",
    10: "PCIe switch (single)",
    20: "PCIe switches (multiple)",
    30: "PCIe host bridge",
    40: "same NUMA node (CPU)",
    50: "across CPUs (system)",
}


def open_nvml() -> tuple[object | None, str]:
    """(the pynvml module, initialised, "") or (None, why not: not installed, no driver). The one
    place NVML is started; nvmlInit counts its callers, so calling this again is cheap and safe."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, ""
    except Exception as e:  # noqa: BLE001 - any failure means: no NVML here
        return None, f"{type(e).__name__}: {e}"


def nvml():
    """The pynvml module, initialised, or None."""
    return open_nvml()[0]


def gpu_dtypes(major: int, minor: int) -> dict:
    """Which dtypes have tensor-core support at this compute capability: the one rule everyone
    asks (precision checks, the report, the recommendation, the controls)."""
    cc = (major, minor)
    return {
        "fp16": cc >= (7, 0),
        "bf16": cc >= (8, 0),
        "tf32": cc >= (8, 0),
        "int8": cc >= (7, 2),
        "fp8": cc >= (8, 9),
    }


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def gpu_info() -> dict:
    """Per-GPU facts and the links between them. `{"count": 0, "gpus": []}` without a GPU."""
    if not torch.cuda.is_available():
        return {"count": 0, "gpus": [], "links": []}
    count = torch.cuda.device_count()
    nv = nvml()
    gpus, handles = [], []
    for i in range(count):
        props = torch.cuda.get_device_properties(i)
        major, minor = torch.cuda.get_device_capability(i)
        g = {
            "index": i,
            "name": props.name,
            "capability": f"{major}.{minor}",
            "sms": props.multi_processor_count,
            "memory_gib": round(props.total_memory / GIB, 2),
            "dtypes": gpu_dtypes(major, minor),
        }
        h = safe(lambda: nv.nvmlDeviceGetHandleByIndex(i)) if nv else None
        handles.append(h)
        if h is not None:
            g["max_sm_clock_mhz"] = safe(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))
            g["pcie_gen"] = safe(lambda: nv.nvmlDeviceGetMaxPcieLinkGeneration(h))
            g["pcie_width"] = safe(lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(h))
            g["power_limit_w"] = safe(lambda: nv.nvmlDeviceGetPowerManagementLimit(h) / 1000)
        gpus.append(g)
    return {
        "count": count,
        "gpus": gpus,
        "cuda_runtime": torch.version.cuda,
        "driver": safe(lambda: _text(nv.nvmlSystemGetDriverVersion())) if nv else None,
        "driver_cuda": safe(lambda: _cuda_version(nv.nvmlSystemGetCudaDriverVersion())) if nv else None,
        "links": [link(i, j, nv, handles) for i in range(count) for j in range(i + 1, count)],
    }


def gpu_free_gib() -> list[float] | None:
    """Free memory of every GPU now, from NVML (no CUDA context is made), or None without NVML."""
    if not torch.cuda.is_available():
        return None
    nv = nvml()
    if nv is None:
        return None
    try:
        return [
            nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(i)).free / GIB
            for i in range(torch.cuda.device_count())
        ]
    except Exception:  # noqa: BLE001 - a driver that does not answer: not checked
        return None


def link(i: int, j: int, nv, handles) -> dict:
    """How GPUs i and j talk: NVLink or the PCIe path between them, and whether peer access works."""
    out = {
        "a": i,
        "b": j,
        "peer_access": bool(safe(lambda: torch.cuda.can_device_access_peer(i, j), False)),
        "kind": "unknown",
    }
    hi, hj = handles[i], handles[j]
    if nv is None or hi is None or hj is None:
        return out
    nvlink = safe(lambda: nv.nvmlDeviceGetP2PStatus(hi, hj, nv.NVML_P2P_CAPS_INDEX_NVLINK))
    if nvlink == nv.NVML_P2P_STATUS_OK:
        out["kind"] = "NVLink"
    else:
        level = safe(lambda: nv.nvmlDeviceGetTopologyCommonAncestor(hi, hj))
        out["kind"] = "PCIe" + (f" via {_TOPOLOGY.get(level, level)}" if level is not None else "")
    return out
