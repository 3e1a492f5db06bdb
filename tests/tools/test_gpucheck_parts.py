"""The GPU check's parts against faked CUDA (torch.cuda.* monkeypatched, a fake pynvml) and a fake
launcher that writes real run folders: what each part plans and skips on which GPU, how it keeps to
its time limit, how it judges what it measured, and the whole check assembling one report."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from gpucheck_fakes import FakeLauncher, FakeNVML, context, fake_gpu
from workbench.events import EventWriter
from workbench.train.sharding import MEMORY_PARTS
from tools.gpucheck import ceilings, check, compression, ddp, fsdp, gpumem, loading, monitor
from tools.gpucheck import report
from tools.gpucheck import runner, training
from workbench.hardware.ceiling import Ceiling
from tools import rounds
from workbench.distributed import limits

PRECHECK = {
    "ok": True,
    "torch_import_s": 1.64,
    "base_rss_gib": 0.2161,
    "data_rss_gib": 0.0068,
    "train_samples": 1402,
    "task": "classify",
    "params": 8970,
    "param_bytes": 35880,
    "activation_bytes_per_sample": 817.0,
    "seconds": 1.657,
}


@pytest.fixture
def launcher(monkeypatch):
    """The fake launcher behind the training part's single runs and its interleaved rounds."""
    fake = FakeLauncher()
    # the pre-launch check's child (tested in test_limits) builds each config's model on the CPU,
    # seconds apiece: what it measured for the smoke config stands in
    monkeypatch.setattr(
        limits.Prechecks, "measure", lambda self, cfg, new_process, timeout_s=None: dict(PRECHECK)
    )
    monkeypatch.setattr(training, "launch_run", fake)
    monkeypatch.setattr(ddp, "launch_run", fake)
    monkeypatch.setattr(fsdp, "launch_run", fake)
    monkeypatch.setattr(rounds, "run", fake)
    return fake


def items_of(rec) -> dict:
    return {i["name"]: i for i in rec.items}


# --- training ------------------------------------------------------------------------------------


def test_training_on_an_h200_runs_every_setting_and_compares_them(monkeypatch, tmp_path, launcher):
    fake_gpu(monkeypatch)
    rec = runner.PartRecord("training", 230.0)
    ctx = context(tmp_path, shared={"ceilings": {"matmul fp32": 50_000.0}})
    training.run(ctx, rec)
    items = items_of(rec)
    ab = items["transformer bf16 vs fp32"]
    assert ab["status"] == "ok" and ab["speedup_rounds"] == training.ROUNDS == 6
    assert 3.0 < ab["speedup"] < 3.7 and ab["speedup_verdict"] == "faster"
    assert ab["speedup_low"] <= ab["speedup"] <= ab["speedup_high"]
    labels = [label for label, _ in launcher.calls[:12]]
    assert labels[:4] == ["fp32-r0", "bf16-r0", "bf16-r1", "fp32-r1"]  # interleaved, order alternating
    bf16 = items["transformer bf16"]
    assert bf16["rounds"] == 6 and bf16["mfu_spec"] > 0 and bf16["mem_peak_gib"] == 2.5
    assert "nvml_peak_gib" in bf16 and bf16["batch"] == training.transformer_batch(50_000.0)
    for name, *_ in training.SINGLES:
        assert items[name]["status"] == "ok", items[name]
    cnn = items["cnn bf16"]
    assert cnn["vs"] == "cnn fp32" and cnn["speedup_verdict"] == "faster"
    assert "separate runs" in cnn["speedup_note"]  # unpaired, and it says so
    assert items["transformer fp16"]["skipped_steps"] == 1 and items["transformer fp16"]["grad_scale"]
    assert rec.figures["contention"]["runs"] == len(launcher.calls)
    assert rec.summary.startswith("bf16 vs fp32 3.")


def test_training_on_a_v100_skips_what_it_cannot_do_with_the_reason(monkeypatch, tmp_path, launcher):
    fake_gpu(monkeypatch, "Tesla V100-SXM2-32GB", (7, 0))
    rec = runner.PartRecord("training", 230.0)
    training.run(context(tmp_path), rec)
    items = items_of(rec)
    assert items["transformer bf16 vs fp32"]["status"] == "skipped"
    assert "compute capability 7.0" in items["transformer bf16 vs fp32"]["reason"]
    assert "TF32 needs compute capability 8.0" in items["cnn tf32"]["reason"]
    assert items["transformer fp32"]["status"] == "ok"  # the reference then runs on its own
    assert items["transformer fp16"]["vs"] == "transformer fp32" and items["transformer fp16"]["speedup"]
    assert items["cnn fp16"]["status"] == "ok"


def test_training_skips_runs_its_limit_has_no_time_for(monkeypatch, tmp_path, launcher):
    fake_gpu(monkeypatch)
    rec = runner.PartRecord("training", 30.0)
    training.run(context(tmp_path, budget_s=training.COMPILE_S - 10), rec)
    items = items_of(rec)
    assert items["cnn bf16"]["status"] == "ok"
    compiled = items["cnn bf16 compile default"]
    assert compiled["status"] == "skipped" and "not enough time left" in compiled["reason"]
    assert all(t is not None and t <= training.COMPILE_S for _, t in launcher.calls)


def test_a_failed_run_is_named_and_the_rest_go_on(monkeypatch, tmp_path, launcher):
    fake_gpu(monkeypatch)
    launcher.fail = {"cnn-bf16", "bf16-r2"}
    rec = runner.PartRecord("training", 230.0)
    training.run(context(tmp_path), rec)
    items = items_of(rec)
    ab = items["transformer bf16 vs fp32"]
    assert ab["status"] == "failed" and "bf16 (round 3) ended failed" in ab["reason"]
    assert items["transformer fp32"]["rounds"] == 3 and items["transformer bf16"]["rounds"] == 2
    assert "too few" in ab["speedup_note"]  # what ran is compared, without a false interval
    assert items["cnn bf16"]["status"] == "failed" and "injected" in items["cnn bf16"]["reason"]
    assert items["cnn bf16 channels_last"]["speedup_note"] == "cnn bf16 was not measured"
    assert items["cnn fp16"]["status"] == "ok"


def test_the_transformer_batch_follows_the_measured_fp32_ceiling():
    assert training.transformer_batch(None) == training.MAX_BATCH
    slow = training.transformer_batch(8_000.0)  # a GPU with 8 TFLOP/s of fp32
    assert 1 <= slow < training.MAX_BATCH
    assert training.transformer_batch(1e9) == training.MAX_BATCH


def test_a_run_s_nvml_peak_comes_from_the_samples_inside_it(tmp_path, monkeypatch):
    fake_gpu(monkeypatch)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    events = EventWriter(run_dir, 0)
    events.write("start")
    events.write("done")
    events.close()
    ts = [r["t"] for r in training.run_records(run_dir)]
    sampler = gpumem.Sampler(gpumem.DeviceMemory(0))
    sampler.samples = [(ts[0] - 5, 50.0, 90.0), (ts[0], 9.0, 40.0), (ts[-1], 11.0, 80.0)]
    row = training.row_of(
        {"status": "completed", "run_dir": str(run_dir), "mem_peak_gib": 8.0}, sampler, baseline_gib=1.0
    )
    assert (row["nvml_peak_gib"], row["util_max_pct"], row["nvml_samples"]) == (11.0, 80.0, 2)
    assert row["nvml_added_gib"] == 10.0 and row["mem_peak_gib"] == 8.0


# --- the report part -----------------------------------------------------------------------------


def test_ceilings_stand_beside_the_h200_datasheet():
    def c(name, kind, value, dtype=None):
        return Ceiling(name, kind, value, "GFLOP/s", 1.0, 0.01, "8192x8192", "cuda:0", dtype).as_dict()

    rows = ceilings.beside_datasheet(
        [
            c("matmul bf16", "compute", 792_000.0, "bf16"),
            c("copy", "bandwidth", 4_300.0),
            c("h2d pinned", "bandwidth", 55.0),
            c("matmul int8", "compute", float("nan"), "int8"),
        ],
        "NVIDIA H200",
        {"pcie_gen": 5, "pcie_width": 16},
    )
    bf16, copy, h2d, int8 = rows
    assert bf16["reference"] == 990_000 and bf16["of_reference"] == 0.8
    assert "H200 datasheet" in bf16["reference_source"]
    assert copy["reference"] == 4800 and copy["of_reference"] == pytest.approx(0.896, abs=1e-3)
    assert h2d["reference"] == ceilings.pcie_gbs(5, 16) == 63.02 and "from NVML" in h2d["reference_source"]
    assert int8["of_reference"] is None
    unknown = ceilings.beside_datasheet([c("matmul bf16", "compute", 1.0, "bf16")], "Mystery GPU", {})
    assert (
        unknown[0]["reference"] is None
        and "not in the workbench's GPU table" in unknown[0]["reference_source"]
    )


def test_the_report_part_records_hardware_ceilings_and_the_cache(monkeypatch, tmp_path):
    fake_gpu(monkeypatch)
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    made = [
        Ceiling("matmul fp32", "compute", 51_000.0, "GFLOP/s", 2.0, 0.02, "8192", "cuda:0", "fp32"),
        Ceiling(
            "matmul int8",
            "compute",
            float("nan"),
            "GOP/s",
            float("nan"),
            float("nan"),
            "",
            "cuda:0",
            "int8",
            note="not available here: no kernel",
        ),
    ]
    monkeypatch.setattr(ceilings, "run_benchmarks", lambda device, progress=None: made)
    rec = runner.PartRecord("report", 50.0)
    ctx = context(tmp_path)
    ceilings.run(ctx, rec)
    items = items_of(rec)
    assert items["hardware report"]["gpu"] == "NVIDIA H200" and items["hardware report"]["driver"]
    assert items["ceiling matmul fp32"]["reference"] == 67_000
    assert items["ceiling matmul int8"]["status"] == "failed"
    assert "no kernel" in items["ceiling matmul int8"]["reason"]
    assert ctx.shared["ceilings"]["matmul fp32"] == 51_000.0
    assert len(list((tmp_path / "cache" / "ceilings").glob("ceilings-*.json"))) == 1
    assert rec.figures["nvml"]["devices"][0]["mem_total_gib"] == 141


# --- ddp, monitor, compression, loading ----------------------------------------------------------


def test_nccl_is_refused_for_two_ranks_on_one_gpu_and_gloo_runs_them(monkeypatch, tmp_path, launcher):
    fake_gpu(monkeypatch)
    rec = runner.PartRecord("ddp", 70.0)
    ddp.gloo_two_ranks(context(tmp_path), rec)
    item = rec.items[0]
    assert item["name"] == "gloo, 2 ranks sharing the GPU" and item["status"] == "ok", item
    assert "distributed.nproc must be <= 1" in item["nccl_refused"]
    assert set(item["ranks"]) == {"0", "1"} and item["ranks"]["1"]["mem_peak_gib"] == 2.5
    launcher.param_sums = [1.5, 2.5]
    ddp.gloo_two_ranks(context(tmp_path), rec)
    assert rec.items[1]["status"] == "failed" and "weights differ" in rec.items[1]["reason"]


def test_the_ddp_config_uses_what_the_gpu_can_do(monkeypatch):
    fake_gpu(monkeypatch)
    assert ddp.small_config(2, "gloo").precision.dtype == "bf16"
    fake_gpu(monkeypatch, "Tesla V100-SXM2-32GB", (7, 0))
    assert ddp.small_config().precision.dtype == "fp32"


def test_fsdp_on_one_gpu_runs_one_rank_and_reports_each_part_and_the_peak(monkeypatch, tmp_path, launcher):
    fake_gpu(monkeypatch)
    rec = runner.PartRecord("fsdp", 30.0)
    fsdp.run(context(tmp_path), rec)
    one, two = rec.items
    assert one["name"] == "fsdp, 1 rank" and one["status"] == "ok", one
    assert one["strategy"] == "one process" and one["precision"] == "bf16"  # an H200 has bf16
    (rank,) = one["ranks"]
    assert rank["differs"] == [] and set(rank["predicted"]) == set(rank["measured"]) == set(MEMORY_PARTS)
    assert rank["predicted_peak_gib"] == 4.625 and rank["peak_gib"] == 5.7812  # 4,736 MiB x 1.25
    assert rank["peak_over_predicted"] == 1.25
    assert two["name"] == "fsdp, 2 ranks" and two["status"] == "skipped"
    assert two["reason"].startswith("1 GPU(s) here: 2 FSDP ranks take one GPU each")
    (cfg,) = launcher.configs
    assert (cfg.distributed.strategy, cfg.distributed.nproc, cfg.run.device) == ("fsdp", 1, "cuda")
    assert cfg.model.width == training.WIDTH and cfg.data.seq_len == training.SEQ
    assert rec.summary == "fsdp, 1 rank peak/predicted 1.25x; fsdp, 2 ranks skipped"
    assert rec.figures["model"]["width"] == training.WIDTH


def test_fsdp_with_two_gpus_shards_over_nccl_and_a_part_off_its_prediction_fails(
    monkeypatch, tmp_path, launcher
):
    fake_gpu(monkeypatch)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    rec = runner.PartRecord("fsdp", 30.0)
    fsdp.run(context(tmp_path), rec)
    assert [i["status"] for i in rec.items] == ["ok", "ok"], rec.items
    two = rec.items[1]
    assert two["strategy"] == "fsdp" and [r["rank"] for r in two["ranks"]] == [0, 1]
    assert two["ranks"][1]["predicted"]["parameters"] == 400 * 2**20  # half of each rank's whole
    cfg = launcher.configs[1]
    assert (cfg.distributed.nproc, cfg.distributed.backend) == (2, "nccl")
    launcher.off = {"activations": 4096}
    rec = runner.PartRecord("fsdp", 30.0)
    fsdp.run(context(tmp_path), rec)
    assert [i["status"] for i in rec.items] == ["failed", "failed"]
    assert rec.items[1]["reason"].startswith(
        f"rank 0 activations: predicted {512 * 2**20}, measured {512 * 2**20 + 4096}; rank 1 activations"
    )
    assert rec.summary == "fsdp, 1 rank failed; fsdp, 2 ranks failed"


def test_fsdp_runs_that_fail_or_have_no_time_left_say_so(monkeypatch, tmp_path, launcher):
    fake_gpu(monkeypatch)
    launcher.fail = {"fsdp-1-rank"}
    rec = runner.PartRecord("fsdp", 30.0)
    fsdp.run(context(tmp_path), rec)
    assert rec.items[0]["status"] == "failed"
    assert rec.items[0]["reason"] == "the run ended failed: rank 0 raised RuntimeError: injected"
    rec = runner.PartRecord("fsdp", 30.0)
    fsdp.run(context(tmp_path, budget_s=training.RUN_S - 5), rec)
    assert rec.items[0]["status"] == "skipped" and "not enough time left" in rec.items[0]["reason"]
    monkeypatch.setattr(fsdp, "refusal", lambda cfg: "distributed.strategy 'fsdp' refused here")
    rec = runner.PartRecord("fsdp", 30.0)
    fsdp.run(context(tmp_path), rec)
    assert rec.items[0] == {
        "name": "fsdp, 1 rank",
        "status": "skipped",
        "reason": "distributed.strategy 'fsdp' refused here",
    }


def test_leftover_processes_and_memory_that_did_not_come_back_are_named():
    dead = __import__("subprocess").Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert ddp.left_alive([dead.pid], timeout_s=0) == []
    assert ddp.left_alive([os.getpid()], timeout_s=0) == [os.getpid()]
    fields = {
        "run_status": "failed",
        "left_alive": [4242],
        "freed": False,
        "nvml_after_gib": 9.0,
        "nvml_before_gib": 1.0,
    }
    problems = ddp._problems(fields, "stopped")
    assert len(problems) == 3 and "[4242]" in problems[1] and "9.0 GiB used after" in problems[2]


def test_nvml_readings_of_one_gpu(monkeypatch):
    nvml = fake_gpu(monkeypatch, nvml=FakeNVML(used_gib=3.0, util=55.0, pids=[11, 12]))
    mem = gpumem.DeviceMemory(0)
    assert mem.available and mem.used_gib() == 3.0 and mem.reading()["util_pct"] == 55.0
    assert [p["pid"] for p in mem.processes()] == [11, 12]
    assert mem.back_to(3.0)["freed"] is True
    nvml.used_gib = 5.0
    held = mem.back_to(3.0, timeout_s=0.3)
    assert held["freed"] is False and held["nvml_after_gib"] == 5.0
    assert gpumem.nvml_index(1, {"CUDA_VISIBLE_DEVICES": "2,3"}) == 3
    assert gpumem.nvml_index(0, {"CUDA_VISIBLE_DEVICES": "GPU-5a1b"}) == 0
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    bare = gpumem.DeviceMemory(0)
    assert not bare.available and "no GPU monitoring" in bare.note
    assert bare.back_to(1.0)["freed"] is None and bare.processes() is None


def test_the_monitor_judges_what_nvml_saw():
    ok = monitor.judge_hold(2.0, 1.0, [1.1, 3.5, 3.4], {"freed": True}, [7, 8], 8)
    assert "reason" not in ok and ok["nvml_added_gib"] == 2.5 and ok["context_and_cache_gib"] == 0.5
    assert ok["pid_listed"] is True
    missed = monitor.judge_hold(2.0, 1.0, [1.5], {"freed": False}, None, 8)
    assert "NVML saw 0.50 GiB more" in missed["reason"] and "did not come back" in missed["reason"]
    assert missed["pid_listed"] is None
    idle = {"mem_used_gib": 1.0, "util_pct": 0.0}
    assert "reason" not in monitor.judge_sampled(idle, {"nvml_peak_gib": 4.0, "util_max_pct": 97.0})
    assert (
        "0 % utilization"
        in monitor.judge_sampled(idle, {"nvml_peak_gib": 4.0, "util_max_pct": 0.0})["reason"]
    )


def test_compression_skips_what_the_gpu_or_the_wheels_cannot_do(monkeypatch, tmp_path):
    fake_gpu(monkeypatch, "Tesla V100-SXM2-32GB", (7, 0))
    monkeypatch.setattr(compression, "torchao_available", lambda: False)
    monkeypatch.setattr("workbench.compress.quantize.torchao_available", lambda: False)
    rec = runner.PartRecord("compression", 35.0)
    compression.sparse_2_4(context(tmp_path), rec)
    compression.int8(context(tmp_path), rec)
    items = items_of(rec)
    assert items["2:4 semi-structured"]["status"] == "skipped"
    assert "compute capability 8.0+, this GPU is 7.0" in items["2:4 semi-structured"]["reason"]
    assert items["int8 dynamic (torchao)"]["reason"] == "torchao is not installed (pip install torchao)"


def test_the_loader_sweep_spans_the_machine_s_cores_and_its_line_names_the_best():
    assert loading.worker_counts(1) == [0, 1]
    assert loading.worker_counts(2) == [0, 1, 2]
    assert loading.worker_counts(16) == [0, 4, 8, 16]
    items = [
        {"name": "host-to-device copies", "status": "ok", "pinned_vs_pageable": "2.10x"},
        {
            "name": "loader sweep",
            "status": "ok",
            "rows": [
                {"setting": "0w b64", "samples_per_s": 900.0},
                {"setting": "4w b64", "samples_per_s": 3100.0},
            ],
        },
        {"name": "non_blocking overlap", "status": "failed", "reason": "x"},
    ]
    line = loading.summary(items)
    assert "pinned vs pageable 2.10x" in line and "loader best 4w b64 at 3,100 samples/s" in line
    assert line.endswith("non_blocking overlap failed")


# --- the whole check -----------------------------------------------------------------------------


def test_the_whole_check_writes_one_report_and_goes_past_a_failed_part(monkeypatch, tmp_path, capsys):
    fake_gpu(monkeypatch)
    for var in ("WORKBENCH_RUNS", "WORKBENCH_CACHE", "PYTHONPATH"):
        monkeypatch.setenv(var, os.environ.get(var, ""))  # restored after the test

    def part(module):
        def run(ctx, rec):
            if module == "ddp":
                raise RuntimeError("NCCL error: unhandled system error")
            rec.item(f"{module} thing", "ok", figure=1.0)
            rec.summary = f"{module} summary"

        return run

    monkeypatch.setattr(check, "_loader", part)
    code = check.run_check(tmp_path / "out", check.DEFAULT_BUDGET_S, list(check.PLAN))
    assert code == 1
    rep = report.read_report(tmp_path / "out")
    assert [p["name"] for p in rep["parts"]] == [p.name for p in check.PLAN]
    assert [p["status"] for p in rep["parts"]] == ["ok", "failed", "ok", "ok", "ok", "ok", "ok"]
    assert "NCCL error" in rep["parts"][1]["error"]
    assert rep["parts"][-1]["limit_s"] <= check.DEFAULT_BUDGET_S  # training: what was left
    assert rep["device"]["name"] == "NVIDIA H200" and rep["device"]["datasheet"]["name"] == "H200"
    assert rep["versions"]["driver"] == "570.86.15" and rep["versions"]["torch"] == torch.__version__
    assert len(rep["goals"]) == 4 and {g["result"] for g in rep["goals"]} == {"not measured"}
    out = capsys.readouterr().out
    assert "GPU check on NVIDIA H200" in out and "ddp" in out and "report:" in out
    assert os.environ["WORKBENCH_RUNS"] == str(tmp_path / "out" / "runs")
    assert str(check.Path(check.__file__).resolve().parents[2]) in os.environ["PYTHONPATH"]
