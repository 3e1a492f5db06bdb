"""A stand-in for the pynvml module, for tests of the GPU figures on a machine without a GPU: one
device with fixed figures, or a library that fails to load."""

from __future__ import annotations

import types


def fake_pynvml(fail_init=False):
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
