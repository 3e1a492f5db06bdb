"""The GPU check (`python -m tools.gpucheck`) on a CPU machine: it skips at once without a GPU; its
runner gives each part a time limit and continues past a part that fails; its parts plan, judge and
report against faked CUDA and a fake pynvml; its report keeps its schema."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from gpucheck_fakes import context
from tools.gpucheck import check, goals, probe, report, runner

ROOT = Path(__file__).resolve().parents[2]


# --- the command ---------------------------------------------------------------------------------


@pytest.mark.skipif(probe.no_gpu_reason() is None, reason="this machine may have an NVIDIA GPU")
def test_without_a_gpu_the_check_skips_in_seconds_and_says_why(tmp_path):
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tools.gpucheck", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert "GPU check skipped: no NVIDIA GPU on this machine" in proc.stdout
    assert "/dev/nvidia0" in proc.stdout and "gpucheck.json" in proc.stdout
    assert took < 30, f"the skip took {took:.1f} s; it must not import torch or run anything"
    rep = report.read_report(tmp_path)
    assert rep["status"] == "skipped" and rep["parts"] == [] and "no NVIDIA GPU" in rep["reason"]
    assert rep["versions"]["packages"]["torch"] and rep["versions"]["torch"]


def test_the_probe_reads_device_nodes_and_the_driver(tmp_path):
    dev, driver = tmp_path / "dev", tmp_path / "driver"
    dev.mkdir()
    reason = probe.no_gpu_reason(dev, driver)
    assert "no NVIDIA GPU" in reason and str(dev / "nvidia0") in reason
    (driver / "gpus" / "0000:01:00.0").mkdir(parents=True)
    assert probe.no_gpu_reason(dev, driver) is None
    (dev / "nvidia0").touch()
    assert probe.no_gpu_reason(dev, tmp_path / "nothing") is None


def test_torch_says_why_it_cannot_use_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    assert "CPU-only build" in probe.torch_reason()
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    assert "CUDA 12.8" in probe.torch_reason() and "is_available() is False" in probe.torch_reason()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert probe.torch_reason() is None


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--parts", "training,nope"], "--parts must name parts from"),
        (["--budget-s", "5"], "--budget-s must be >= 60"),
    ],
)
def test_bad_arguments_get_one_line(argv, words, capsys):
    from tools.gpucheck.__main__ import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_a_gpu_machine_without_psutil_is_told_what_to_bring(monkeypatch, tmp_path, capsys):
    from tools.gpucheck import __main__ as cli

    monkeypatch.setattr(cli, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(cli, "torch_reason", lambda: None)
    monkeypatch.setattr(cli, "missing_required", lambda: ["psutil"])
    assert cli.main(["--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "cannot run: psutil not installed" in err and "docs/gpu-check.md" in err
    assert report.read_report(tmp_path)["status"] == "failed"


def test_the_plan_fits_eight_minutes_and_parts_are_chosen_by_name():
    assert check.DEFAULT_BUDGET_S <= 8 * 60 - 20  # start-up and the report come on top
    bounded = sum(p.limit_s for p in check.PLAN if p.limit_s != float("inf"))
    assert check.DEFAULT_BUDGET_S - bounded >= 200  # what training is sure to get
    assert check.PLAN[0].name == "report"  # its ceilings size the training runs and give MFU a peak
    assert [p.name for p in check.select("training, report")] == ["report", "training"]
    assert [p.name for p in check.select(None)] == [p.name for p in check.PLAN]


def test_everything_it_runs_imports_without_jupyter_plotly_or_pandas():
    mods = [
        "probe",
        "runner",
        "report",
        "goals",
        "check",
        "ceilings",
        "training",
        "ddp",
        "fsdp",
        "monitor",
        "compression",
        "loading",
        "gpumem",
        "holder",
        "__main__",
    ]
    code = (
        "import sys\n"
        "for name in ('pandas', 'plotly', 'ipywidgets', 'jupyterlab', 'IPython', 'anywidget'):\n"
        "    sys.modules[name] = None\n" + "".join(f"import tools.gpucheck.{m}\n" for m in mods)
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]


# --- the runner: limits, failures, the budget ------------------------------------------------------


def _part(name, fn, limit=30.0):
    return runner.Part(name, limit, f"the {name} part", fn)


def test_a_failing_part_is_recorded_and_the_next_one_runs(tmp_path):
    ran = []

    def boom(ctx, rec):
        rec.item("first thing", "ok", figure=1)
        raise ValueError("the device said no\nsecond line")

    def fine(ctx, rec):
        ran.append("fine")
        rec.item("thing", "ok")
        rec.item("other", "skipped", reason="not on this GPU")

    progress = []
    records = runner.run_parts(
        [_part("boom", boom), _part("fine", fine)],
        context(tmp_path),
        on_progress=lambda r: progress.append([x.status for x in r]),
    )
    assert [r.status for r in records] == ["failed", "ok"] and ran == ["fine"]
    assert records[0].error == "ValueError: the device said no"
    assert records[0].items == [{"name": "first thing", "status": "ok", "figure": 1}]
    assert "Traceback" in records[0].figures["traceback"]
    assert progress == [["failed", "pending"], ["failed", "ok"]]  # the report is written as it goes


def test_a_failed_item_fails_its_part(tmp_path):
    records = runner.run_parts(
        [_part("p", lambda ctx, r: r.item("x", "failed", reason="no"))], context(tmp_path)
    )
    assert records[0].status == "failed" and records[0].error == "failed: x"


def test_a_part_past_its_limit_is_stopped_and_the_check_goes_on(tmp_path):
    def endless(ctx, rec):
        rec.item("done before the limit", "ok")
        while True:  # a part that would never end on its own
            time.sleep(0.01)

    records = runner.run_parts(
        [_part("endless", endless, limit=0.3), _part("next", lambda ctx, rec: rec.item("ran", "ok"))],
        context(tmp_path),
    )
    assert records[0].status == "timed out" and records[0].error == "stopped at its 0.3 s limit"
    assert records[0].items[0]["name"] == "done before the limit"  # what it finished is kept
    assert records[1].status == "ok"


def test_the_launcher_s_stop_runs_when_the_limit_interrupts_a_wait(tmp_path):
    """The watchdog's exception is a BaseException: `except Exception` cannot swallow it, and
    `finally` blocks (the launcher stopping its run) still run."""
    cleaned = []

    def waits(ctx, rec):
        try:
            try:
                while True:
                    time.sleep(0.01)
            except Exception:  # noqa: BLE001 - must not catch the timeout
                rec.item("swallowed", "failed")
        finally:
            cleaned.append(True)

    records = runner.run_parts([_part("waits", waits, limit=0.2)], context(tmp_path))
    assert records[0].status == "timed out" and cleaned == [True] and records[0].items == []


def test_a_part_stuck_in_a_call_that_ignores_signals_counts_as_hung(tmp_path):
    hung = []

    def stuck(ctx, rec):
        signal.pthread_sigmask(signal.SIG_BLOCK, {runner.WAKE})
        try:
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline and not hung:
                time.sleep(0.01)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {runner.WAKE})

    records = runner.run_parts(
        [_part("stuck", stuck, limit=0.2)],
        context(tmp_path),
        on_hang=lambda recs, rec: hung.append(rec.name),
        grace_s=0.2,
    )
    assert hung == ["stuck"]
    assert records[0].status == "timed out"  # the signal lands once the part unblocks it


def test_parts_share_the_budget_and_none_starts_without_time(tmp_path):
    limits = []
    ctx = context(tmp_path, budget_s=20.0)
    records = runner.run_parts(
        [_part("a", lambda c, r: limits.append(c.left()), limit=100.0), _part("b", lambda c, r: None)], ctx
    )
    assert limits[0] <= 20.0 and records[0].limit_s <= 20.0  # cut to what the budget has left
    ctx = context(tmp_path, budget_s=runner.MIN_PART_S / 2)
    records = runner.run_parts([_part("late", lambda c, r: pytest.fail("must not start"))], ctx)
    assert records[0].status == "skipped" and "time budget" in records[0].error


# --- the report ---------------------------------------------------------------------------------


def _records():
    ok = runner.PartRecord("training", 230.0, "runs", status="ok", seconds=120.5, summary="fine")
    ok.item(
        "transformer bf16 vs fp32",
        "ok",
        speedup=3.1,
        speedup_label="3.10x [2.90, 3.30] over 6 rounds: faster",
    )
    ok.item(
        "transformer bf16",
        "ok",
        mfu_spec=0.43,
        tflops=425.0,
        spec_tflops=990,
        mem_peak_gib=12.5,
        nvml_peak_gib=14.1,
        nan_figure=math.nan,
    )
    bad = runner.PartRecord(
        "compression", 35.0, "sparsity", status="failed", seconds=3.0, error="RuntimeError: no kernel"
    )
    bad.item(
        "2:4 semi-structured",
        "ok",
        speedup=0.93,
        speedup_verdict="slower",
        speedup_label="0.93x [0.90, 0.95] over 12 rounds: slower",
    )
    return [ok, bad]


META = {
    "created": "2026-12-01 10:00:00",
    "budget_s": 450.0,
    "device": {"name": "NVIDIA H200"},
    "versions": {
        "python": "3.12.3",
        "torch": "2.11.0",
        "cuda": "12.8",
        "driver": "570.86",
        "packages": {"torchao": None},
    },
}


def test_the_report_is_written_read_back_and_keeps_its_schema(tmp_path):
    rep = report.assemble(META, _records(), wall_s=200.0)
    path = report.write_report(tmp_path, rep)
    back = report.read_report(path)
    assert back["status"] == "failed" and back["schema"] == report.SCHEMA
    for key, kind in report.TOP.items():
        assert isinstance(back[key], kind), key
    for part in back["parts"]:
        for key, kind in report.PART.items():
            assert isinstance(part[key], kind), (part["name"], key)
    assert back["parts"][0]["items"][1]["nan_figure"] is None  # no NaN in the JSON
    assert json.loads(path.read_text())["versions"]["torch"] == "2.11.0"
    assert [g["result"] for g in back["goals"]] == ["pass", "pass", "pass", "fail"]


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda r: r.pop("versions"), "report.versions is missing"),
        (lambda r: r["versions"].pop("driver"), "report.versions.driver is missing"),
        (lambda r: r["parts"][0].update(seconds="long"), "parts[0].seconds must be"),
        (lambda r: r["parts"][1].update(status="meh"), "parts[1].status must be one of"),
        (lambda r: r["parts"][0]["items"].append({"status": "ok"}), "parts[0].items[2].name is missing"),
        (lambda r: r["goals"][0].pop("result"), "goals[0].result is missing"),
        (lambda r: r.update(wall_s=True), "report.wall_s must be"),
    ],
)
def test_an_unsound_report_is_refused_naming_what_is_wrong(tmp_path, damage, words):
    rep = report.clean(report.assemble(META, _records(), wall_s=10.0))
    damage(rep)
    assert any(words in p for p in report.schema_problems(rep)), report.schema_problems(rep)
    with pytest.raises(ValueError, match="gpucheck.json does not hold a sound report"):
        report.write_report(tmp_path, rep)
    assert not (tmp_path / report.FILE).exists()


def test_the_table_shows_every_part_and_goal():
    rep = report.clean(report.assemble(META, _records(), wall_s=200.0))
    text = report.format_table(rep)
    assert "NVIDIA H200" in text and "torch 2.11.0" in text and "200 s of a 450 s budget" in text
    assert "training" in text and "compression" in text and "RuntimeError: no kernel" in text
    assert "pass          bf16 training of the transformer vs fp32 >= 2.5x: 3.10x" in text
    assert "fail          2:4 semi-structured" in text


def test_goals_are_judged_from_measured_figures_only():
    parts = report.clean([r.as_dict() for r in _records()])
    assert [g["result"] for g in goals.judge([], "NVIDIA H200")] == ["not measured"] * 4
    judged = goals.judge(parts, "NVIDIA H100 80GB HBM3")
    assert judged[1]["measured"].startswith("43.0% (425.0 TFLOP/s of 990 datasheet)")
    assert all("goal set for an H200" in g["note"] for g in judged)
    parts[0]["items"][0]["speedup"] = 2.4
    parts[0]["items"][1].update(mfu_spec=0.39, nvml_peak_gib=None)
    assert [g["result"] for g in goals.judge(parts, "NVIDIA H200")] == ["fail"] * 4
