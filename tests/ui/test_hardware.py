"""The hardware lab's widgets build and redraw without a browser (Jupyter is not needed)."""

from __future__ import annotations

import math

import pytest
from workbench.config import ConfigError
from workbench.events import EventWriter
from workbench.hardware import microbench
from workbench.train.flops import StepCost
from workbench.hardware.microbench import Ceiling
from workbench.runstore import write_json_atomic

ui = pytest.importorskip("workbench.ui.hardware")


@pytest.fixture(autouse=True)
def _private(private_cache):
    return private_cache


def _c(name, kind, value, dtype=None):
    return Ceiling(
        name,
        kind,
        value,
        "GFLOP/s" if kind == "compute" else "GB/s",
        1.0,
        0.1,
        "",
        "cpu",
        dtype,
        check=value * 1.02,
    )


def test_report_widget_lists_faked_gpus_and_links():
    from workbench.hardware.machine_report import hardware_report

    rep = hardware_report()
    rep["gpu"] = {
        "count": 2,
        "driver": "550",
        "driver_cuda": "12.4",
        "gpus": [
            {
                "index": i,
                "name": "NVIDIA H200",
                "capability": "9.0",
                "sms": 132,
                "memory_gib": 140.0,
                "dtypes": {"fp16": True, "bf16": True, "tf32": True, "int8": True, "fp8": True},
            }
            for i in (0, 1)
        ],
        "links": [{"a": 0, "b": 1, "kind": "NVLink", "peer_access": True}],
    }
    html = ui.report_widget(rep).value
    assert "NVIDIA H200" in html and "NVLink" in html and "fp8" in html


def test_roofline_has_a_roof_per_measured_dtype_and_a_point_per_model():
    cs = [
        _c("matmul fp32", "compute", 150.0, "fp32"),
        _c("matmul bf16", "compute", 900.0, "bf16"),
        _c("matmul fp16", "compute", math.nan, "fp16"),
        _c("copy", "bandwidth", 12.0),
    ]
    pts = [{"model": "mlp", "dtype": "fp32", "intensity": 9.0, "gflops": 40.0}]
    fig = ui.roofline_figure(cs, pts)
    assert len(fig.data) == 3
    roof = fig.data[0]
    assert max(roof.y) == 150.0 and min(roof.y) == pytest.approx(12.0 * 0.01)
    html = ui.ceilings_html(cs)
    assert "0.98x" in html and "not available" not in html  # the two timers' ratio is shown


def test_bench_panel_runs_with_a_progress_bar_and_caches(monkeypatch):
    monkeypatch.setattr(microbench, "plan", lambda d, q, r: [("copy", lambda: _c("copy", "bandwidth", 9.0))])
    monkeypatch.setattr(
        ui,
        "run_benchmarks",
        lambda device, quick, progress: microbench.run_benchmarks(device, quick, 0, progress),
    )
    panel = ui.BenchPanel("cpu", quick=True)
    out = panel.run()
    assert out[0].value == 9.0 and panel.progress.value == panel.progress.max == 1
    assert "cached for MFU" in panel.status.value and "copy" in panel.table.value


def test_chooser_panel_redraws_when_the_batch_grows():
    cost = StepCost(10**9, 200, 10**6, 4 * 10**6, 10**7, 8)
    panel = ui.ChooserPanel(cost, dtype="bf16", batch_scale=1)
    small = dict(zip(panel.fig.data[0].y, panel.fig.data[0].x))
    panel.scale.value = 4096
    big = dict(zip(panel.fig.data[0].y, panel.fig.data[0].x))
    assert big["T4"] > small["T4"] * 10 and len(big) == 12
    with pytest.raises(ConfigError, match=r"^batch x=8192.0 is not allowed: 1 to 4096$"):
        panel.scale.value = 8192  # refused, not clamped to 4096 without a word
    assert panel.scale.value == 4096


def test_mfu_figure_plots_a_runs_step_records(tmp_path):
    w = EventWriter(tmp_path, 0)
    for step in range(1, 4):
        w.write("step", step=step, loss=1.0, step_time_ms=1.0, tflops=0.01, mfu=0.05)
    w.close()
    write_json_atomic(
        tmp_path / "summary.json",
        {"status": "completed", "mfu": 0.05, "mfu_basis": "estimate", "peak_tflops": 0.2},
    )
    fig = ui.mfu_figure(tmp_path)
    assert list(fig.data[0].y) == [5.0, 5.0, 5.0] and "estimate" in fig.layout.title.text
