"""What this machine is, as one report: CPU model, cores and instruction sets, memory, the torch
build, and per GPU its name, compute capability, SMs, memory, dtypes, driver and link topology.

    workbench hw --json

The facts come from workbench.machine (cpu, gpu); this module puts them together and formats them.
"""

from __future__ import annotations

import platform

import torch

from ..machine.cpu import cpu_info, isa_text, memory_info, safe
from ..machine.gpu import gpu_info


def torch_build() -> dict:
    """Which torch this is and which vendor libraries it was built with."""
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cudnn": safe(lambda: torch.backends.cudnn.version()),
        "onednn": torch.backends.mkldnn.is_available(),
        "mkl": safe(lambda: torch.backends.mkl.is_available(), False),
        "openmp": safe(lambda: torch.backends.openmp.is_available(), False),
    }


def hardware_report() -> dict:
    """The whole report as plain data (JSON-ready)."""
    return {
        "host": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "cpu": cpu_info(),
        "memory": memory_info(),
        "torch": torch_build(),
        "gpu": gpu_info(),
    }


def format_report(rep: dict) -> str:
    """The report as aligned text for a terminal."""
    c, m, t, g = rep["cpu"], rep["memory"], rep["torch"], rep["gpu"]
    flags = isa_text(c)
    lines = [
        f"CPU      {c['model']} ({c['arch']}), {c['logical_cpus']} logical CPUs, "
        f"{c['usable_cpus']} usable, torch uses {c['torch_threads']} threads",
        f"         instruction sets: {flags}; torch kernels: {c['torch_cpu_capability']}",
        f"Memory   {m.get('total_gib', '?')} GiB total, {m.get('available_gib', '?')} GiB available",
        f"torch    {t['torch']}, CUDA {t['cuda'] or 'none'}, cuDNN {t['cudnn'] or 'none'}, "
        f"oneDNN {'yes' if t['onednn'] else 'no'}, MKL {'yes' if t['mkl'] else 'no'}",
    ]
    if not g["count"]:
        lines.append("GPU      none (torch.cuda.is_available() is False)")
    else:
        lines.append(
            f"GPU      {g['count']} device(s), driver {g.get('driver') or '?'} "
            f"(CUDA {g.get('driver_cuda') or '?'}), torch's CUDA runtime {g.get('cuda_runtime')}"
        )
        for d in g["gpus"]:
            dts = ", ".join(k for k, on in d["dtypes"].items() if on)
            lines.append(
                f"  [{d['index']}] {d['name']}: capability {d['capability']}, {d['sms']} SMs, "
                f"{d['memory_gib']} GiB; tensor-core dtypes: {dts}"
            )
        for lk in g["links"]:
            lines.append(
                f"  GPU{lk['a']} <-> GPU{lk['b']}: {lk['kind']}, "
                f"peer access {'yes' if lk['peer_access'] else 'no'}"
            )
    return "\n".join(lines)
