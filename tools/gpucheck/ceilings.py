"""Part "report": what the GPU is and what it can do, each measured ceiling beside the datasheet value
the workbench holds for this GPU (workbench.machine.gpus).

It runs the hardware report (name, capability, memory, driver, links), NVML's readings, and the
micro-benchmarks of workbench.hardware.microbench: matmul in fp32, TF32, bf16, fp16 and int8, a
device-to-device copy, host-to-device and back from pinned and pageable memory (and all-reduce with
two or more GPUs). The ceilings are cached under the check's folder, so every training run after this
part reports MFU against the measured peak as well as the datasheet's.
"""

from __future__ import annotations

import math

from workbench.hardware.microbench import run_benchmarks
from workbench.hardware.machine_report import hardware_report
from workbench.machine.gpus import find_gpu
from workbench.machine.monitor import NvmlReader
from workbench.machine.peaks import save_ceilings

# PCIe: transfer rate per lane (GT/s) and the share left after line coding, by generation.
_PCIE = {
    1: (2.5, 0.8),
    2: (5.0, 0.8),
    3: (8.0, 128 / 130),
    4: (16.0, 128 / 130),
    5: (32.0, 128 / 130),
    6: (64.0, 242 / 256),
}


def pcie_gbs(gen: int | None, width: int | None) -> float | None:
    """One direction of a PCIe link in GB/s, from its generation and lane count."""
    if gen not in _PCIE or not width:
        return None
    rate, coding = _PCIE[gen]
    return round(rate * coding * width / 8, 2)


def reference(ceiling: dict, spec, gpu: dict) -> tuple[float | None, str]:
    """The figure to set a ceiling beside (in its own unit) and where it comes from."""
    name, kind = ceiling["name"], ceiling["kind"]
    if kind == "compute":
        if spec is None:
            return None, "this GPU is not in the workbench's GPU table"
        peak = spec.peak(ceiling["dtype"])
        return (peak * 1e3 if peak else None), f"datasheet dense {ceiling['dtype']}: {spec.source}"
    if name == "copy":
        if spec is None:
            return None, "this GPU is not in the workbench's GPU table"
        return spec.bandwidth_gbs, f"datasheet memory bandwidth: {spec.source}"
    if name.startswith(("h2d", "d2h")):
        gen, width = gpu.get("pcie_gen"), gpu.get("pcie_width")
        link = pcie_gbs(gen, width)
        return link, (
            f"PCIe gen {gen} x{width} link, one direction (generation and width from NVML)"
            if link
            else "NVML did not report the PCIe link"
        )
    if name == "all-reduce" and spec is not None:
        return spec.interconnect_gbs, f"datasheet {spec.interconnect}"
    return None, ""


def beside_datasheet(ceilings: list[dict], gpu_name: str, gpu: dict) -> list[dict]:
    """Each measured ceiling with the reference value and the measured share of it."""
    spec = find_gpu(gpu_name)
    rows = []
    for c in ceilings:
        ref, source = reference(c, spec, gpu)
        value = c.get("value")
        measured = value is not None and not (isinstance(value, float) and math.isnan(value))
        rows.append(
            {
                **c,
                "reference": ref,
                "reference_source": source,
                "of_reference": round(value / ref, 3) if measured and ref else None,
            }
        )
    return rows


def _summary(rows: list[dict]) -> str:
    by = {r["name"]: r for r in rows}
    parts = []
    for name, scale, unit in (
        ("matmul bf16", 1e3, "TFLOP/s"),
        ("copy", 1e3, "TB/s"),
        ("h2d pinned", 1, "GB/s"),
    ):
        r = by.get(name)
        if r and r.get("of_reference"):
            parts.append(
                f"{name} {r['value'] / scale:.4g} {unit} ({r['of_reference']:.0%} of "
                f"{r['reference'] / scale:.4g})"
            )
        elif r and r.get("value") == r.get("value"):
            parts.append(f"{name} {r['value'] / scale:.4g} {unit}")
    return "; ".join(parts)


def run(ctx, rec) -> None:
    rep = hardware_report()
    rec.figures["hardware"] = rep
    nvml = NvmlReader()
    rec.figures["nvml"] = {"note": nvml.note, "devices": nvml.sample()}
    gpu = next((g for g in rep["gpu"]["gpus"] if g["index"] == ctx.device.index), {})
    rec.item(
        "hardware report",
        "ok" if gpu else "failed",
        gpu=gpu.get("name"),
        capability=gpu.get("capability"),
        memory_gib=gpu.get("memory_gib"),
        driver=rep["gpu"].get("driver"),
        links=rep["gpu"].get("links"),
        nvml_note=nvml.note,
        **({} if gpu else {"reason": "the hardware report lists no GPU at this index"}),
    )

    def progress(i, n, label):
        if i < n:
            ctx.log(f"[report] ceiling {i + 1}/{n}: {label}")

    measured = run_benchmarks(ctx.device, progress=progress)
    rec.figures["ceilings_cached_to"] = str(save_ceilings(measured, ctx.device))
    rows = beside_datasheet([c.as_dict() for c in measured], gpu.get("name", ""), gpu)
    for r in rows:
        failed = r["value"] is None or r["value"] != r["value"]  # nan: the benchmark could not run
        fields = {("op" if k == "name" else k): v for k, v in r.items()}
        rec.item(
            f"ceiling {r['name']}",
            "failed" if failed else "ok",
            **({"reason": r["note"]} if failed else {}),
            **fields,
        )
    ctx.shared["ceilings"] = {r["name"]: r["value"] for r in rows}
    rec.summary = _summary(rows)
