"""The system monitor: CPU figures from psutil always, GPU figures from NVML when there is one
(faked here), a clear note when there is none."""

from __future__ import annotations

import os
import sys
import time
import types

from workbench.machine.monitor import NvmlReader, SystemMonitor, sample_system
from workbench.ui.monitor_view import MonitorView, describe


def _fake_pynvml(fail_init=False):
    m = types.ModuleType("pynvml")

    def init():
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    m.nvmlInit = init
    m.nvmlDeviceGetCount = lambda: 1
    m.nvmlDeviceGetHandleByIndex = lambda i: f"gpu{i}"
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=3 * 2**30, total=80 * 2**30)
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=57, memory=20)
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [object(), object()]
    return m


def test_without_nvml_the_cpu_figures_remain(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(fail_init=True))
    reader = NvmlReader()
    s = sample_system([os.getpid()], reader)
    assert s["gpus"] == [] and "no GPU monitoring" in s["gpu_note"]
    assert 0 <= s["cpu_pct"] <= 100 and s["run_rss_gib"] > 0
    assert "no GPU monitoring (RuntimeError: NVML Shared Library Not Found)" in describe(s)


def test_nvml_device_figures_cover_all_processes(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    s = sample_system([], NvmlReader())
    assert s["gpus"] == [
        {"index": 0, "mem_used_gib": 3.0, "mem_total_gib": 80.0, "util_pct": 57.0, "processes": 2}
    ]
    assert s["run_rss_gib"] is None
    assert "GPU 0: 57% busy, 3.0/80.0 GiB used (all processes, 2 processes)" in describe(s)
    view = MonitorView()
    view.update(s)
    view.update(dict(s, t=s["t"] + 1))
    assert [t.name for t in view.figure.data] == ["CPU", "GPU 0"]
    assert list(view.figure.data[1].y) == [57.0, 57.0]


def test_monitor_runs_about_once_a_second_only_between_start_and_stop():
    got = []
    mon = SystemMonitor(got.append, interval_s=0.1)
    mon.start([os.getpid()])
    time.sleep(0.55)
    mon.stop()
    assert not mon.running and 3 <= len(got) <= 7
    n = len(got)
    time.sleep(0.3)
    assert len(got) == n
