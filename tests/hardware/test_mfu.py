"""FLOP counting leaves no trace, MFU per step and in the summary, and the GPU chooser."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from workbench.config import ConfigError, RunConfig
from workbench.machine import peaks as ceilings
from workbench.hardware.chooser import Assumptions, choose, estimate, fit_sentence, memory_need_gib
from workbench.train.flops import StepCost, count_step, cost_of_config
from workbench.machine.gpus import find_gpu
from workbench.train.mfu import MfuMeter, run_dtype
from workbench.hardware.roofline import attainable, model_point


@pytest.fixture(autouse=True)
def _private(private_cache):
    return private_cache


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """These tests check behaviour, not speed: one thread keeps them steady under load."""


def test_linear_layer_flops_are_forward_plus_weight_gradient():
    torch.manual_seed(0)
    model = nn.Linear(32, 16)
    x, y = torch.randn(8, 32), torch.randint(0, 16, (8,))
    flops, ops, act = count_step(model, x, y, nn.functional.cross_entropy)
    assert flops == 2 * 8 * 32 * 16 * 2  # forward, weight gradient; no input gradient needed
    assert ops > 0 and act >= x.numel() * 4


def _noisy_model():
    return nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.Dropout(0.5), nn.ReLU(), nn.Linear(32, 4))


def _train(model, steps=5):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def test_counting_leaves_rng_buffers_and_gradients_as_they_were():
    torch.manual_seed(1)
    plain = _noisy_model()
    torch.manual_seed(1)
    counted = _noisy_model()
    torch.manual_seed(2)
    reference = _train(plain)
    torch.manual_seed(2)
    count_step(counted, torch.randn(8, 16), torch.randint(0, 4, (8,)), nn.functional.cross_entropy)
    assert all(p.grad is None for p in counted.parameters())
    assert torch.equal(counted[1].running_mean, torch.zeros(32)) and counted[1].num_batches_tracked == 0
    # the batch above came from the RNG too; training restarts the same stream for a fair comparison
    torch.manual_seed(2)
    assert _train(counted) == reference


def test_cost_of_an_mlp_config_matches_the_formula():
    cfg = RunConfig.smoke().replace(
        **{"data.name": "synthetic_images", "data.num_samples": 64, "data.image_size": 4, "data.channels": 1}
    )  # 16 inputs
    c = cost_of_config(cfg)  # MLP 16 -> 64 -> 64 -> 10, batch 32
    fwd = 2 * 32 * (16 * 64 + 64 * 64 + 64 * 10)
    assert c.flops == 3 * fwd - 2 * 32 * 16 * 64  # backward is 2x forward, minus the input's gradient
    assert c.params == 16 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10
    assert c.bytes_moved == c.params * 40 + 2 * c.activation_bytes and c.intensity > 0


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


def _cost(params, flops, act, ops=100):
    return StepCost(flops, ops, params, params * 4, act, 64, "adamw", 1)


def test_memory_need_counts_weights_grads_adam_state_and_activations():
    m = memory_need_gib(_cost(2**30 // 4, 1, 2**30), batch_scale=2, a=Assumptions(context_gib=1))
    assert (m["weights_gib"], m["grads_gib"], m["optimizer_gib"], m["activations_gib"]) == (1, 1, 2, 2)
    assert m["total_gib"] == 7


def test_chooser_ranks_fitting_gpus_first_and_says_what_bounds_them():
    big = _cost(3 * 10**9, 6 * 3 * 10**9 * 64 * 2048, 20 * 2**30)  # ~3B params, too big for 24 GB
    df = choose(big, "bf16")
    fits = df[df.fits]
    assert set(fits.gpu) >= {"H200", "A100 80GB SXM"} and "RTX 4090" not in set(fits.gpu)
    assert list(df.fits) == sorted(df.fits, reverse=True)
    assert fits.step_ms.is_monotonic_increasing
    assert (df.bound == "compute").all()
    tiny = estimate(_cost(1000, 10**6, 10**4), find_gpu("NVIDIA H100 80GB HBM3"), "bf16")
    assert tiny["bound"] == "launch"


def test_chooser_says_what_one_rank_holds_with_ddp_and_with_fsdp():
    cost = _cost(2**31, 10**12, 2 * 2**30)  # 32 GiB of weights, gradients and AdamW state
    rows = {r["gpu"]: r for r in choose(cost, "bf16", ranks=8).to_dict("records")}
    small, big = rows["RTX 4090"], rows["H200"]
    assert small["rank_gib_ddp"] == pytest.approx(32 + 2 + 1)  # whole state, activations, context
    assert small["rank_gib_fsdp"] == pytest.approx(32 / 8 + 2 + 1)
    assert fit_sentence(small) == "fits on 8 x 24 GiB (RTX 4090) with FSDP, not with DDP"
    assert fit_sentence(big).startswith("fits on 8 x 141 GiB (H200) with DDP and with FSDP")
    huge = {r["gpu"]: r for r in choose(_cost(2**35, 10**12, 2**30), ranks=2).to_dict("records")}
    assert fit_sentence(huge["RTX 4090"]).startswith("does not fit on 2 x 24 GiB (RTX 4090)")
    assert "rank_gib_ddp" not in choose(cost, "bf16").columns  # without ranks: one device
    with pytest.raises(ConfigError, match="ranks must be an integer >= 1, got 0"):
        choose(cost, ranks=0)


def test_chooser_falls_back_to_what_a_run_would_use_and_refuses_bad_input():
    row = estimate(_cost(10**6, 10**12, 10**6), find_gpu("Tesla V100-SXM2-32GB"), "bf16")
    assert row["dtype"] == "fp16" and row["peak_tflops"] == 125 and "no bf16 here" in row["note"]
    assert estimate(_cost(10**6, 10**12, 10**6), find_gpu("NVIDIA A100-SXM4-80GB"), "fp8")["dtype"] == "bf16"
    assert estimate(_cost(10**6, 10**12, 10**6), find_gpu("Tesla T4"), "tf32")["dtype"] == "fp32"
    with pytest.raises(ConfigError, match="dtype must be one of"):
        choose(_cost(1, 1, 1), "fp64")
    with pytest.raises(ConfigError, match="batch_scale must be > 0, got 0"):
        choose(_cost(1, 1, 1), batch_scale=0)
    with pytest.raises(ConfigError, match=r"chooser.compute_eff must be in \(0, 1\], got 1.5"):
        Assumptions(compute_eff=1.5)


def test_a_built_in_model_lands_under_its_roofline():
    p = model_point(RunConfig.smoke(), "cpu", repeats=2)
    assert p["flops"] > 0 and p["step_ms"] > 0 and p["gflops"] > 0 and p["intensity"] > 0
    assert attainable(p["intensity"], 1e9, 10.0) == pytest.approx(10.0 * p["intensity"])
    assert attainable(1e9, 100.0, 10.0) == 100.0
