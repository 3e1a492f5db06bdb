"""Spec sheets of common GPUs: dense (not 2:4-sparse) peak TFLOP/s per dtype, memory, bandwidth, link.

Every entry names its source. Vendors print sparse figures next to dense ones; these are the dense
ones (half the sparse). fp16/bf16 are tensor-core rates with fp32 accumulation, as in training.
fp32 is the CUDA-core (non-tensor) rate; tf32 is None where the GPU has no TF32 mode. int8 in TOP/s.
"""

from __future__ import annotations

import re

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class GPUSpec:
    name: str
    arch: str
    memory_gib: float  # as sold, in GB; close enough to GiB for "does it fit"
    bandwidth_gbs: float  # device memory, GB/s
    interconnect: str  # between GPUs of a server
    interconnect_gbs: float  # GB/s total per GPU (NVLink) or one direction x16 (PCIe)
    peak_tflops: dict = field(default_factory=dict)  # dtype -> dense TFLOP/s, None = not supported
    source: str = ""
    match: tuple = ()  # regexes over torch.cuda.get_device_name() that identify it

    def peak(self, dtype: str) -> float | None:
        return self.peak_tflops.get(dtype)

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("match")
        return d


def _p(fp32, tf32, bf16, fp16, fp8, int8) -> dict:
    return {"fp32": fp32, "tf32": tf32, "bf16": bf16, "fp16": fp16, "fp8": fp8, "int8": int8}


GPUS: list[GPUSpec] = [
    GPUSpec(
        "V100 SXM2 32GB",
        "Volta",
        32,
        900,
        "NVLink 2",
        300,
        _p(15.7, None, None, 125, None, 62),
        "NVIDIA Tesla V100 datasheet (SXM2): 15.7 FP32, 125 tensor; int8 via DP4A (Volta "
        "whitepaper: 4x FP32 rate)",
        (r"V100",),
    ),
    GPUSpec(
        "T4",
        "Turing",
        16,
        320,
        "PCIe 3.0 x16",
        16,
        _p(8.1, None, None, 65, None, 130),
        "NVIDIA T4 datasheet: 8.1 FP32, 65 FP16 mixed, 130 INT8 TOPS, 320 GB/s",
        (r"\bT4\b",),
    ),
    GPUSpec(
        "A10",
        "Ampere",
        24,
        600,
        "PCIe 4.0 x16",
        32,
        _p(31.2, 62.5, 125, 125, None, 250),
        "NVIDIA A10 datasheet: 31.2 FP32, 62.5 TF32, 125 BF16/FP16, 250 INT8 (dense)",
        (r"\bA10\b",),
    ),
    GPUSpec(
        "L4",
        "Ada",
        24,
        300,
        "PCIe 4.0 x16",
        32,
        _p(30.3, 60, 121, 121, 242, 242),
        "NVIDIA L4 datasheet: 30.3 FP32; 120/242/485/485 TF32/BF16/FP8/INT8 with sparsity, halved here",
        (r"\bL4\b",),
    ),
    GPUSpec(
        "A100 40GB SXM",
        "Ampere",
        40,
        1555,
        "NVLink 3",
        600,
        _p(19.5, 156, 312, 312, None, 624),
        "NVIDIA A100 datasheet (40GB SXM): 19.5 FP32, 156 TF32, 312 BF16/FP16, 624 INT8, 1,555 GB/s",
        (r"A100.*40\s?GB",),
    ),
    GPUSpec(
        "A100 80GB SXM",
        "Ampere",
        80,
        2039,
        "NVLink 3",
        600,
        _p(19.5, 156, 312, 312, None, 624),
        "NVIDIA A100 datasheet (80GB SXM): as 40GB, HBM2e 2,039 GB/s",
        (r"A100",),
    ),
    GPUSpec(
        "L40S",
        "Ada",
        48,
        864,
        "PCIe 4.0 x16",
        32,
        _p(91.6, 183, 362, 362, 733, 733),
        "NVIDIA L40S datasheet: 91.6 FP32; 366/733/1,466/1,466 TF32/BF16/FP8/INT8 with sparsity, "
        "halved here; 864 GB/s",
        (r"L40S",),
    ),
    GPUSpec(
        "H100 SXM",
        "Hopper",
        80,
        3350,
        "NVLink 4",
        900,
        _p(67, 495, 990, 990, 1979, 1979),
        "NVIDIA H100 datasheet (SXM): 67 FP32; 989/1,979/3,958/3,958 TF32/BF16/FP8/INT8 with "
        "sparsity, halved here; 3.35 TB/s",
        (r"H100.*(HBM3|SXM)",),
    ),
    GPUSpec(
        "H100 PCIe",
        "Hopper",
        80,
        2000,
        "PCIe 5.0 x16 (NVLink bridge 600)",
        64,
        _p(51, 378, 756, 756, 1513, 1513),
        "NVIDIA H100 datasheet (PCIe): 51 FP32; 756/1,513/3,026/3,026 TF32/BF16/FP8/INT8 with "
        "sparsity, halved here; 2 TB/s",
        (r"H100",),
    ),
    GPUSpec(
        "H200",
        "Hopper",
        141,
        4800,
        "NVLink 4",
        900,
        _p(67, 495, 990, 990, 1979, 1979),
        "NVIDIA H200 datasheet (SXM): compute as H100 SXM; 141 GB HBM3e at 4.8 TB/s",
        (r"H200",),
    ),
    GPUSpec(
        "RTX 3090",
        "Ampere",
        24,
        936,
        "PCIe 4.0 x16 (NVLink bridge 112.5)",
        32,
        _p(35.6, 35.6, 71, 71, None, 284),
        "NVIDIA GA102 whitepaper (RTX 3090): 35.6 FP32/TF32, 71 FP16/BF16 with FP32 accumulate, "
        "284 INT8; 936 GB/s",
        (r"RTX 3090",),
    ),
    GPUSpec(
        "RTX 4090",
        "Ada",
        24,
        1008,
        "PCIe 4.0 x16",
        32,
        _p(82.6, 82.6, 165, 165, 330, 661),
        "NVIDIA Ada (AD102) whitepaper (RTX 4090): 82.6 FP32/TF32, 165.2 FP16/BF16 and 330 FP8 "
        "with FP32 accumulate, 661 INT8; 1,008 GB/s",
        (r"RTX 4090",),
    ),
]

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")


def find_gpu(device_name: str) -> GPUSpec | None:
    """The table entry for a name as torch reports it ('NVIDIA H100 80GB HBM3'), or None."""
    for spec in GPUS:  # ordered so specific patterns win (A100 40GB before A100, H100 SXM before H100)
        if any(re.search(m, device_name, re.IGNORECASE) for m in spec.match):
            return spec
    return None


def gpu_table() -> "pd.DataFrame":  # noqa: F821
    import pandas as pd

    rows = []
    for g in GPUS:
        row = {
            "gpu": g.name,
            "arch": g.arch,
            "memory_gb": g.memory_gib,
            "bandwidth_gbs": g.bandwidth_gbs,
            "interconnect": g.interconnect,
        }
        row.update({f"{k}_tflops": v for k, v in g.peak_tflops.items()})
        row["source"] = g.source
        rows.append(row)
    return pd.DataFrame(rows)
