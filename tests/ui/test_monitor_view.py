"""The monitor's view in a notebook: its sentence for a sample and its live chart, a line per
device (NVML faked here)."""

from __future__ import annotations

import os
import sys

from nvml_fake import fake_pynvml
from workbench.machine.monitor import NvmlReader, sample_system
from workbench.ui.monitor_view import MonitorView, describe


def test_without_nvml_the_view_says_why_there_are_no_gpu_figures(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(fail_init=True))
    s = sample_system([os.getpid()], NvmlReader())
    assert "no GPU monitoring (RuntimeError: NVML Shared Library Not Found)" in describe(s)


def test_the_view_describes_each_gpu_and_charts_it_beside_the_cpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    s = sample_system([], NvmlReader())
    assert "GPU 0: 57% busy, 3.0/80.0 GiB used (all processes, 2 processes)" in describe(s)
    view = MonitorView()
    view.update(s)
    view.update(dict(s, t=s["t"] + 1))
    assert [t.name for t in view.figure.data] == ["CPU", "GPU 0"]
    assert list(view.figure.data[1].y) == [57.0, 57.0]
