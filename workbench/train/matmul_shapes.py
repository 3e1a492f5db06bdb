"""The matrix multiplications a model's forward runs, with their shapes: what decides whether a
16-bit type pays on this device (a CPU's bf16 units pay on large matrices and not on small ones).

    shapes = matmul_shapes(model, x, amp)   # [{"op": "addmm", "m": 64, "k": 64, "n": 256, ...}, ...]

Recorded at the dispatcher during one forward on a real batch, with no trace left (the RNG, buffers
and gradients restored): `mm`, `addmm`, `bmm`, `baddbmm` and convolutions (as the matrix product
they amount to: output positions x input channels x kernel, times output channels). Each shape
has the side of the square matmul with its FLOPs (`side`), which places it on a curve measured
with square matmuls (workbench.hardware.size_curve).
"""

from __future__ import annotations

import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .flops import no_trace

_aten = torch.ops.aten
MATMULS = {
    _aten.mm.default: "mm",
    _aten.addmm.default: "addmm",
    _aten.bmm.default: "bmm",
    _aten.baddbmm.default: "baddbmm",
    _aten.convolution.default: "conv",
}


def _shape(op: str, args, out) -> tuple[int, int, int, int]:
    """(batch, m, k, n) of one call: `batch` independent m x k by k x n products."""
    if op == "mm":
        (m, k), n = args[0].shape, args[1].shape[1]
        return 1, m, k, n
    if op == "addmm":
        (m, k), n = args[1].shape, args[2].shape[1]
        return 1, m, k, n
    if op in ("bmm", "baddbmm"):
        a, b = (args[0], args[1]) if op == "bmm" else (args[1], args[2])
        return a.shape[0], a.shape[1], a.shape[2], b.shape[2]
    weight, groups = args[1], int(args[8]) if len(args) > 8 else 1  # convolution
    positions = out.shape[0] * math.prod(out.shape[2:])
    return groups, positions, math.prod(weight.shape[1:]), weight.shape[0] // groups


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls: list[dict] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        op = MATMULS.get(func)
        if op is not None:
            batch, m, k, n = (int(v) for v in _shape(op, args, out))
            dtype = str(out.dtype).replace("torch.", "")
            self.calls.append({"op": op, "batch": batch, "m": m, "k": k, "n": n, "dtype": dtype})
        return out


def side(shape: dict) -> float:
    """The side of the square matmul with this call's FLOPs per product: (m k n)^(1/3)."""
    return (shape["m"] * shape["k"] * shape["n"]) ** (1 / 3)


def flops(shape: dict) -> int:
    return 2 * shape["batch"] * shape["m"] * shape["k"] * shape["n"]


def matmul_shapes(model: torch.nn.Module, x, amp=None) -> list[dict]:
    """Every matrix product of one forward of `model` on `x` (under `amp`, the run's autocast), in
    order, each with its FLOPs and its side; nothing of the call is left behind."""
    recorder = _Recorder()
    with no_trace(model), torch.no_grad(), recorder:
        if amp is not None:
            with amp:
                model(x)
        else:
            model(x)
    return [{**c, "flops": flops(c), "side": round(side(c), 1)} for c in recorder.calls]
