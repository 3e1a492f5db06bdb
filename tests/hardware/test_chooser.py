"""The GPU chooser (the memory a step needs, what fits, what bounds a step, what one rank holds)
and the roofline."""

from __future__ import annotations

import pytest

from workbench.config import ConfigError, RunConfig
from workbench.hardware.chooser import Assumptions, choose, estimate, fit_sentence, memory_need_gib
from workbench.hardware.roofline import attainable, model_point
from workbench.machine.gpus import find_gpu
from workbench.train.flops import StepCost


# Behaviour, not speed: one thread keeps these steady under load. Each has a cache of its own.
pytestmark = pytest.mark.usefixtures("private_cache", "one_thread")


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
