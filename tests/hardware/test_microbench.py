"""Micro-benchmarks, the ceiling cache and `workbench hw`. Behaviour, never speed: the machine is
shared, so figures only have to be positive and finite."""

from __future__ import annotations

import json
import math

import pytest
import torch

from workbench.cli import main as cli
from workbench.hardware import microbench
from workbench.machine import peaks as ceilings
from workbench.hardware.microbench import Ceiling


@pytest.fixture(autouse=True)
def _private(private_cache):
    return private_cache


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """These tests check behaviour, not speed: one thread keeps them steady under load."""


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "int8"])
def test_matmul_measures_a_finite_rate_and_torch_benchmark_agrees_roughly(dtype):
    c = microbench.matmul(dtype, "cpu", max_n=256, cap_ms=20, repeats=3)
    assert c.kind == "compute" and c.dtype == dtype and math.isfinite(c.value) and c.value > 0.01
    assert c.unit == ("GOP/s" if dtype == "int8" else "GFLOP/s")
    assert c.check > 0 and math.isfinite(c.check_ratio)
    n = int(c.size.split("x")[0])
    assert 128 <= n <= 256 and n % 128 == 0


def test_matmul_refuses_tf32_on_the_cpu_and_unknown_dtypes():
    with pytest.raises(ValueError, match="tf32 is a CUDA tensor-core mode"):
        microbench.matmul("tf32", "cpu")
    with pytest.raises(ValueError, match="dtype must be one of"):
        microbench.matmul("fp64", "cpu")


def test_pick_size_gives_slow_paths_small_problems():
    slow = lambda a: torch.sin(a).sum()  # noqa: E731  stands in for any op
    fast_n = microbench.pick_size(slow, lambda k: (torch.randn(k, k),), "cpu", cap_ms=1e6, max_n=1024)
    slow_n = microbench.pick_size(slow, lambda k: (torch.randn(k, k),), "cpu", cap_ms=1e-6, max_n=1024)
    assert fast_n == 1024 and slow_n == 128


def test_pick_size_shrinks_a_size_whose_call_runs_far_over_the_cap():
    """A path fast at the probe's size and slow above it (a kernel that falls out of cache): the
    cubic estimate from the probe picks max_n, the call there runs 10x the cap, and n shrinks."""
    import time

    def cliff(a):
        if a.shape[0] > 256:
            time.sleep(0.2)  # stands in for a kernel 10x over the cap, not a wait for anything
        return a.sum()

    n = microbench.pick_size(cliff, lambda k: (torch.zeros(k, k),), "cpu", cap_ms=20, max_n=1024)
    assert n <= 256


def test_copy_bandwidth_counts_read_and_write_bytes():
    c = microbench.copy_bandwidth("cpu", mib=16, repeats=3)
    assert c.kind == "bandwidth" and c.unit == "GB/s" and c.value > 0.01 and c.check > 0
    assert c.value == pytest.approx(2 * 16 * 2**20 / c.median_ms / 1e6, rel=0.01)


def test_host_transfer_refuses_an_unknown_direction():
    with pytest.raises(ValueError, match="direction must be 'h2d' or 'd2h'"):
        microbench.host_transfer("d2d", True, "cpu")


def test_plan_on_a_faked_gpu_adds_tf32_transfers_and_allreduce(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    labels = [label for label, _ in microbench.plan("cuda", quick=True)]
    assert labels[:5] == ["matmul fp32", "matmul tf32", "matmul bf16", "matmul fp16", "matmul int8"]
    assert {"h2d pinned", "h2d pageable", "d2h pinned", "d2h pageable", "all-reduce"} <= set(labels)
    assert "matmul tf32" not in [label for label, _ in microbench.plan("cpu")]


def test_run_benchmarks_reports_progress_and_keeps_going_past_a_failure(monkeypatch):
    seen = []
    real = microbench.plan

    def plan(device, quick, ranks):
        steps = real(device, quick, ranks)[:1]
        return steps + [("matmul fp8", lambda: (_ for _ in ()).throw(RuntimeError("no fp8 here")))]

    monkeypatch.setattr(microbench, "plan", plan)
    out = microbench.run_benchmarks("cpu", quick=True, progress=lambda i, n, lab: seen.append((i, n, lab)))
    assert seen[0] == (0, 2, "matmul fp32") and seen[-1] == (2, 2, "done")
    assert out[0].value > 0 and math.isnan(out[1].value) and "no fp8 here" in out[1].note


def _ceiling(dtype, value):
    return Ceiling(f"matmul {dtype}", "compute", value, "GFLOP/s", 1.0, 0.1, "128x128", "cpu", dtype)


def test_cache_keeps_the_highest_ceiling_and_peak_for_prefers_it(private_cache):
    assert ceilings.peak_for("cpu", "fp32")["basis"] in ("estimate", None)
    ceilings.save_ceilings([_ceiling("fp32", 150.0), _ceiling("fp16", math.nan)], "cpu")
    ceilings.save_ceilings([_ceiling("fp32", 90.0)], "cpu")  # a quiet measurement, lower
    entry = ceilings.load_ceilings("cpu")
    assert entry["compute_gflops"] == {"fp32": 150.0} and entry["busy"] is False
    p = ceilings.peak_for("cpu", "fp32")
    assert p["basis"] == "measured" and p["peak_tflops"] == pytest.approx(0.15)
    assert p["spec_basis"] == "estimate"


def test_a_busy_ceiling_has_a_file_of_its_own_and_says_so_where_it_is_shown(private_cache):
    """Two writers under different conditions never overwrite each other; the newest figure is the
    one used (the page that measured it a moment ago reads it), named busy and dated wherever it is
    shown."""
    from workbench.hardware.lessons import int8_ceiling_line

    busy = [_ceiling("fp32", 40.0), _ceiling("int8", 60.0)]
    for c in busy:
        c.other_cores = 1.6
    busy_file = ceilings.save_ceilings(busy, "cpu")
    entry = ceilings.load_ceilings("cpu")
    assert entry["busy"] is True and entry["compute_gflops"]["fp32"] == 40.0
    assert ceilings.peak_for("cpu", "fp32")["basis"] == "measured busy"
    assert "beside other programs holding 1.6 cores" in int8_ceiling_line("cpu")
    quiet_file = ceilings.save_ceilings([_ceiling("fp32", 150.0)], "cpu")
    assert quiet_file != busy_file and busy_file.is_file()
    assert json.loads(busy_file.read_text())["compute_gflops"]["fp32"] == 40.0  # not replaced
    assert ceilings.load_ceilings("cpu")["compute_gflops"] == {"fp32": 150.0}
    assert ceilings.peak_for("cpu", "fp32")["basis"] == "measured"
    ceilings.save_ceilings(busy, "cpu")  # measured again, busy: the newest, so the one an MFU uses
    p = ceilings.peak_for("cpu", "fp32")
    assert p["basis"] == "measured busy" and p["peak_tflops"] == pytest.approx(0.04)
    assert "beside other programs holding 1.6 cores" in p["peak_when"] and p["peak_when"].startswith(
        "measured 2"
    )


def test_cache_from_another_torch_is_ignored(private_cache, monkeypatch):
    ceilings.save_ceilings([_ceiling("fp32", 150.0)], "cpu")
    monkeypatch.setattr(torch, "__version__", "1.0")
    assert ceilings.load_ceilings("cpu") is None


def test_cli_hw_json_reports_without_benchmarks(capsys):
    assert cli(["hw", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["report"]["cpu"]["logical_cpus"] >= 1 and "ceilings" not in out


def test_cli_hw_gpus_prints_the_spec_table(capsys):
    assert cli(["hw", "--gpus"]) == 0
    out = capsys.readouterr().out
    assert "H100 SXM" in out and "RTX 4090" in out and "bf16_tflops" in out


def test_cli_hw_bench_quick_prints_ceilings_and_caches_them(capsys, private_cache, monkeypatch):
    monkeypatch.setattr(
        microbench,
        "plan",
        lambda d, q, r: (
            [
                (label, lambda: microbench.matmul("fp32", d, max_n=256, cap_ms=20, repeats=3))
                for label in ["matmul fp32"]
            ]
            + [("copy", lambda: microbench.copy_bandwidth(d, mib=8, repeats=3))]
        ),
    )
    assert cli(["hw", "--bench", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "matmul fp32" in out and "copy" in out and "torch.utils.benchmark" in out
    assert ceilings.load_ceilings("cpu")["compute_gflops"]["fp32"] > 0
    assert cli(["hw"]) == 0
    assert "Cached   ceilings measured" in capsys.readouterr().out


def test_cli_hw_refuses_a_missing_gpu_or_bad_values(capsys):
    if not torch.cuda.is_available():
        assert cli(["hw", "--device", "cuda"]) == 2
        assert "torch sees no CUDA GPU" in capsys.readouterr().err
    assert cli(["hw", "--device", "tpu"]) == 2
    assert "--device must be auto, cpu, cuda or cuda:N, got 'tpu'" in capsys.readouterr().err
    assert cli(["hw", "--allreduce-ranks", "-1"]) == 2


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_allreduce_bus_bandwidth_across_two_gloo_ranks():
    from workbench.hardware.allreduce import busbw_gbs, run_allreduce

    assert busbw_gbs(10**9, 1000.0, 2) == pytest.approx(1.0)
    c = run_allreduce(2, "cpu", mib=4)
    assert c.name == "all-reduce" and c.value > 0 and "gloo" in c.note and "2 ranks" in c.size


def test_notebook_03_reads_the_int8_ceiling_notebook_04_measured(private_cache):
    """The two notebooks' int8 figures side by side: the bare matmul's ceiling from the cache, or
    how to measure it."""
    from workbench.hardware.lessons import int8_ceiling_line

    assert int8_ceiling_line("cpu").startswith("no int8 ceiling is measured on this device yet")
    ceilings.save_ceilings([_ceiling("fp32", 100.0), _ceiling("int8", 250.0)], "cpu")
    line = int8_ceiling_line("cpu")
    assert "a bare int8 matmul 250 GOP/s against fp32's 100 GFLOP/s, 2.50x" in line
    assert "its speedup is the one this notebook measures" in line
