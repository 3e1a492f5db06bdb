"""The system monitor: CPU figures from psutil always, GPU figures from NVML when there is one
(faked here), a clear note when there is none, and a sampling thread that runs only between start
and stop."""

from __future__ import annotations

import os
import sys

from launch_helpers import wait_for
from nvml_fake import fake_pynvml
from workbench.machine.monitor import NvmlReader, SystemMonitor, sample_system


def test_without_nvml_the_cpu_figures_remain(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(fail_init=True))
    reader = NvmlReader()
    s = sample_system([os.getpid()], reader)
    assert s["gpus"] == [] and "no GPU monitoring" in s["gpu_note"]
    assert 0 <= s["cpu_pct"] <= 100 and s["run_rss_gib"] > 0


def test_nvml_device_figures_cover_all_processes(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    s = sample_system([], NvmlReader())
    assert s["gpus"] == [
        {"index": 0, "mem_used_gib": 3.0, "mem_total_gib": 80.0, "util_pct": 57.0, "processes": 2}
    ]
    assert s["run_rss_gib"] is None


def test_the_monitor_samples_every_interval_only_between_start_and_stop():
    got = []
    mon = SystemMonitor(got.append, interval_s=0.1)
    mon.start([os.getpid()])
    wait_for(lambda: len(got) >= 3, 60, "three samples")  # however slowly a busy machine runs it
    mon.stop()
    assert not mon.running  # the thread has ended: no sample can come after stop
    n = len(got)
    times = [s["t"] for s in got]
    assert all(b - a >= 0.09 for a, b in zip(times, times[1:]))  # never sooner than the interval
    mon.start([os.getpid()])  # a monitor starts again after a stop
    wait_for(lambda: len(got) > n, 60, "a sample after the restart")
    mon.stop()
    assert not mon.running
