"""The workbench's timer against torch.utils.benchmark on the same operations, and the dtype ratios
of this device's matmul ceilings, measured side by side in one run:

    python -m tools.bench hardware
"""

from __future__ import annotations

import math

import torch

from workbench.hardware.microbench import copy_bandwidth, matmul
from .results import recorded


@recorded("hardware", "The workbench's timer against torch.utils.benchmark, and matmul dtype ratios")
def main(argv=None) -> int:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"device {device}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    dtypes = ["fp32", "bf16", "fp16", "int8"] + (["tf32"] if device.type == "cuda" else [])
    rows = []
    for dtype in dtypes:
        try:
            rows.append(matmul(dtype, device, repeats=10))
        except RuntimeError as e:
            print(f"matmul {dtype}: not available here ({str(e).splitlines()[0][:80]})")
    rows.append(copy_bandwidth(device, mib=256, repeats=10))
    print(f"{'op':<14}{'size':>12}{'workbench':>14}{'torch.utils.benchmark':>24}{'ratio':>8}{'spread':>8}")
    for c in rows:
        print(
            f"{c.name:<14}{c.size:>12}{c.value:>10.4g} {c.unit:<4}{c.check:>19.4g} {c.unit:<4}"
            f"{c.check_ratio:>8.2f}{c.spread:>8.0%}"
        )
    fp32 = next((c.value for c in rows if c.dtype == "fp32"), math.nan)
    print("\nmatmul ceilings relative to fp32 (same run):")
    for c in rows:
        if c.kind == "compute" and c.dtype != "fp32":
            print(f"  {c.dtype:<5} {c.value / fp32:6.2f}x  (sizes: {c.size} vs fp32's)")
    off = [c.name for c in rows if c.check_ratio and abs(c.check_ratio - 1) > 0.1]
    if off:
        print(
            f"\nthe two timers differ by more than 10 % on: {', '.join(off)} "
            "(a busy machine; rerun when it is quiet)"
        )
    return 0
