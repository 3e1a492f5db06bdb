"""MFU per step and in the summary, against measured and estimated peaks."""

from __future__ import annotations

import json
import math

import pytest

from workbench.config import RunConfig
from workbench.machine import peaks as ceilings
from workbench.train.mfu import MfuMeter, run_dtype


# Behaviour, not speed: one thread keeps these steady under load. Each has a cache of its own.
pytestmark = pytest.mark.usefixtures("private_cache", "one_thread")


def test_meter_reports_tflops_and_mfu_per_step_without_a_sync():
    m = MfuMeter(
        10**9, {"peak_tflops": 0.5, "basis": "estimate", "spec_tflops": 0.5, "spec_basis": "estimate"}, "fp32"
    )
    assert m.step(0.01) == {"tflops": 0.1, "mfu": 0.2}
    s = m.summary(10.0)
    assert s["mfu"] == 0.2 and s["mfu_basis"] == "estimate" and s["mfu_spec"] == 0.2
    assert "mfu_measured" not in s
    assert MfuMeter(None, None, "fp32", "boom").summary(1.0) == {"mfu_error": "boom"}
    assert MfuMeter(None, None, "fp32").step(0.01) == {}


def test_mfu_above_the_peak_is_never_reported_and_says_the_peak_is_wrong():
    m = MfuMeter(
        10**9,
        {
            "peak_tflops": 0.01,
            "basis": "measured",
            "spec_tflops": 1.0,
            "spec_basis": "estimate",
            "measured_tflops": 0.01,
        },
        "fp32",
    )
    assert m.step(0.01) == {"tflops": 0.1, "mfu_over_peak": True}  # 10x the peak: not a result
    s = m.summary(10.0)
    assert "mfu" not in s and "mfu_measured" not in s and s["mfu_spec"] == 0.1
    assert "1000% of the measured peak (10 GFLOP/s)" in s["mfu_error"]
    assert "workbench hw --bench" in s["mfu_error"]


def test_tf32_peak_applies_to_fp32_runs_with_tf32_on_a_gpu():
    cfg = RunConfig.smoke().replace(**{"precision.tf32": True})
    assert run_dtype(cfg, "cuda") == "tf32" and run_dtype(cfg, "cpu") == "fp32"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_every_training_run_carries_mfu_against_measured_and_estimated_peaks(smoke):
    from workbench.events import read_events
    from workbench.hardware.microbench import Ceiling
    from workbench.distributed.launch import run

    ceilings.save_ceilings(
        [Ceiling("matmul fp32", "compute", 100.0, "GFLOP/s", 1.0, 0.1, "", "cpu", "fp32")], "cpu"
    )
    result = run(smoke.replace(**{"run.device": "cpu"}), timeout_s=200)
    assert result["status"] == "completed"
    assert result["flops_per_step"] > 0 and result["tflops"] > 0
    assert result["mfu_basis"] == "measured" and result["peak_tflops"] == pytest.approx(0.1)
    assert result["mfu"] == pytest.approx(result["tflops"] / 0.1, rel=1e-3)
    assert result["spec_basis"] == "estimate" and result["mfu_spec"] > 0
    steps = [r for r in read_events(result["run_dir"]) if r["event"] == "step"]
    assert all(r["tflops"] > 0 and math.isfinite(r["mfu"]) for r in steps)
    summary = json.loads((__import__("pathlib").Path(result["run_dir"]) / "summary.json").read_text())
    assert summary["mfu"] == result["mfu"]
