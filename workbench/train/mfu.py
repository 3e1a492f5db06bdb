"""Model FLOPs utilisation of a training run: FLOPs per step (counted once, before the timed loop)
divided by the step time, as a share of the device's peak for the run's dtype.

The trainer calls `MfuMeter.for_run` once and `meter.step(dt)` per step: one division, no device
sync. The live value and the summary's are the same definition (FLOPs per step over that step's
time, or the median step's, against the peak of the dtype the run uses). The peak is the measured
ceiling when `workbench hw --bench` has cached one for this device, else the GPU's spec sheet,
else (CPU) an estimate from its instruction sets; `mfu_basis` says which, and the summary carries
both the measured and the spec figure when they are known. An MFU above 100 % is not a result:
the peak it was divided by is wrong, so it is never written as `mfu`; the record says so instead.
"""

from __future__ import annotations

import hashlib

import torch

from ..cache import read_json, write_json
from ..events import MFU, MFU_OVER_PEAK, TFLOPS
from ..machine.peaks import peak_for
from .flops import step_cost


def run_dtype(cfg, device) -> str:
    """The dtype whose peak applies: the autocast dtype, or tf32 for fp32 with TF32 on a GPU."""
    dtype = cfg.precision.dtype
    if dtype == "fp32" and cfg.precision.tf32 and torch.device(device).type == "cuda":
        return "tf32"
    return dtype


COUNTS = "flops.json"


def count_key(cfg, model, data, device) -> str:
    """What a step's FLOPs depend on: the model's modules and parameter shapes, the batch and its
    accumulation, the precision and memory format, the device type and the torch version."""
    h = hashlib.sha1()
    for name, m in model.named_modules():
        h.update(f"{name}:{type(m).__module__}.{type(m).__qualname__};".encode())
    for name, p in model.named_parameters():
        h.update(f"{name}:{tuple(p.shape)}:{p.dtype};".encode())
    h.update(
        repr(
            (
                tuple(data.input_shape),
                min(cfg.loader.batch_size, len(data.train)),
                cfg.optim.grad_accum_steps,
                cfg.precision.dtype,
                cfg.precision.channels_last,
                data.task,
                torch.device(device).type,
                torch.__version__,
            )
        ).encode()
    )
    return h.hexdigest()


def _sig(x: float, digits: int = 4) -> float:
    """Round to significant digits: a tiny model's MFU is 1e-5, and must not round to 0."""
    return float(f"{x:.{digits}g}")


class MfuMeter:
    def __init__(self, flops_per_step: int | None, peaks: dict | None, dtype: str, error: str = ""):
        self.flops = flops_per_step
        self.peaks = peaks or {}
        self.dtype = dtype
        self.error = error
        self.peak = self.peaks.get("peak_tflops")

    @classmethod
    def for_run(cls, cfg, model, data, device) -> "MfuMeter":
        """Count one step's FLOPs on the real (unwrapped, uncompiled) model, or recall the count of
        the same model and shapes (counting costs a forward and a backward under the counter, on
        the path to the first step). Never fails a run: a model FlopCounterMode cannot count gets
        a meter that reports nothing and says why."""
        dtype = run_dtype(cfg, device)
        key = count_key(cfg, model, data, device)
        counts = read_json(COUNTS)
        flops = counts.get(key)
        if flops is None:
            try:
                flops = step_cost(cfg, model, data, device).flops
            except Exception as e:  # a user's model with an op the counter cannot trace
                return cls(None, None, dtype, f"{type(e).__name__}: {e}"[:200])
            counts[key] = flops
            write_json(COUNTS, dict(list(counts.items())[-500:]))  # best effort, bounded
        return cls(flops, peak_for(device, dtype), dtype)

    def step(self, dt_s: float) -> dict:
        """Per-step fields: achieved TFLOP/s and its share of the peak (or that it exceeded it)."""
        if not self.flops or dt_s <= 0:
            return {}
        tflops = self.flops / dt_s / 1e12
        out = {TFLOPS: _sig(tflops)}
        if self.peak:
            share = tflops / self.peak
            out.update({MFU: _sig(share)} if share <= 1 else {MFU_OVER_PEAK: True})
        return out

    def summary(self, step_time_ms_median: float | None) -> dict:
        """Summary fields: FLOPs per step, TFLOP/s at the median step, MFU against every peak."""
        if not self.flops:
            return {"mfu_error": self.error} if self.error else {}
        out = {"flops_per_step": self.flops, "mfu_dtype": self.dtype}
        if not step_time_ms_median:
            return out
        tflops = self.flops / (step_time_ms_median / 1e3) / 1e12
        out[TFLOPS] = _sig(tflops)
        p = self.peaks
        wrong = []
        for key, peak, basis in (
            (MFU, self.peak, p.get("basis")),
            ("mfu_spec", p.get("spec_tflops"), p.get("spec_basis")),
            ("mfu_measured", p.get("measured_tflops"), "measured"),
        ):
            if not peak:
                continue
            share = tflops / peak
            if share <= 1:
                out[key] = _sig(share)
            else:
                wrong.append(f"{share:.0%} of the {basis} peak ({peak * 1e3:.4g} GFLOP/s)")
        if self.peak:
            out.update(mfu_basis=p.get("basis"), peak_tflops=_sig(self.peak))
            if p.get("peak_when"):
                out["peak_when"] = p["peak_when"]
        if p.get("spec_tflops"):
            out.update(spec_basis=p["spec_basis"], spec_tflops=_sig(p["spec_tflops"]))
        if p.get("measured_tflops"):
            out["measured_tflops"] = _sig(p["measured_tflops"])
        if wrong:
            out["mfu_error"] = (
                f"this run reached {' and '.join(wrong)}: no run can pass its "
                "peak, so that peak is wrong (measured on a busy machine, or an "
                "estimate); measure it with `workbench hw --bench`"
            )
        return out
