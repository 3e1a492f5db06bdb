"""The goals issue 17 sets for an H200, judged from what the parts measured: bf16 training of the
transformer at least 2.5x fp32, MFU at least 40 % of the dense bf16 datasheet peak, device memory from
NVML and from the allocator both shown, 2:4 sparsity faster than dense at a size where it should be.

Each goal is "pass", "fail" or "not measured", with the measured figure beside it; nothing is assumed.
On another GPU the same goals are judged and the note says they were set for an H200.
"""

from __future__ import annotations

from workbench.events import MEM_PEAK_GIB, TFLOPS

GOAL_GPU = "H200"
BF16_SPEEDUP = 2.5  # bf16 over fp32 samples/s, transformer training
MFU_SPEC = 0.40  # of the dense bf16 datasheet peak
PASS, FAIL, NOT_MEASURED = "pass", "fail", "not measured"


def find_item(parts: list[dict], part: str, item: str) -> dict:
    """The item named `item` of the part named `part` in a report's parts, or {}."""
    for p in parts:
        if p.get("name") == part:
            for i in p.get("items", []):
                if i.get("name") == item:
                    return i
    return {}


def _goal(goal: str, target: str, passed: bool | None, measured: str, note: str = "") -> dict:
    result = NOT_MEASURED if passed is None else (PASS if passed else FAIL)
    return {"goal": goal, "target": target, "measured": measured, "result": result, "note": note}


def _gib(v) -> str:
    return "-" if v is None else f"{v:.2f} GiB"


def judge(parts: list[dict], gpu_name: str = "") -> list[dict]:
    """Every goal, judged from the parts' items (see training.py and compression.py for the names)."""
    note = (
        ""
        if GOAL_GPU.lower() in gpu_name.lower()
        else f"goal set for an {GOAL_GPU}; this GPU is {gpu_name or 'unknown'}"
    )
    out = []

    ab = find_item(parts, "training", "transformer bf16 vs fp32")
    r = ab.get("speedup")
    out.append(
        _goal(
            "bf16 training of the transformer vs fp32",
            f">= {BF16_SPEEDUP}x",
            None if r is None else r >= BF16_SPEEDUP,
            ab.get("speedup_label") or ab.get("reason") or "not run",
            note,
        )
    )

    bf16 = find_item(parts, "training", "transformer bf16")
    mfu = bf16.get("mfu_spec")
    measured = (
        f"{mfu:.1%} ({bf16.get(TFLOPS)} TFLOP/s of {bf16.get('spec_tflops')} datasheet)"
        if mfu is not None
        else bf16.get("mfu_error") or bf16.get("reason") or "not run"
    )
    out.append(
        _goal(
            "MFU of bf16 transformer training vs the dense bf16 datasheet peak",
            f">= {MFU_SPEC:.0%}",
            None if mfu is None else mfu >= MFU_SPEC,
            measured,
            note,
        )
    )

    alloc, nvml = bf16.get(MEM_PEAK_GIB), bf16.get("nvml_peak_gib")
    both = None if not bf16 else (alloc is not None and nvml is not None)
    out.append(
        _goal(
            "device memory of a training run from the allocator and from NVML",
            "both shown",
            both,
            f"allocator peak {_gib(alloc)}, NVML peak {_gib(nvml)}"
            + (f" ({bf16['nvml_note']})" if bf16.get("nvml_note") else ""),
            note,
        )
    )

    sparse = find_item(parts, "compression", "2:4 semi-structured")
    verdict = sparse.get("speedup_verdict")
    out.append(
        _goal(
            "2:4 semi-structured sparsity vs dense at a large matmul",
            "faster",
            None if verdict is None else verdict == "faster",
            sparse.get("speedup_label") or sparse.get("reason") or "not run",
            note,
        )
    )
    return out
