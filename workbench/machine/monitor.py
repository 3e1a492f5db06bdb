"""Device-level readings at about 1 Hz while a run goes: GPU memory and utilization through NVML
(every process on the device, so memory held by others shows too) and CPU use and RSS through
psutil. Without a GPU or NVML it says so and keeps the CPU figures.

    reader = NvmlReader(); sample_system(pids=[handle.proc.pid], nvml=reader)  # a plain dict
    SystemMonitor(callback).start(pids=...)  # the same on a thread, once a second
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterable

import psutil

from .gpu import GIB, open_nvml


class NvmlReader:
    """GPU figures per device from NVML; `note` says why there are none."""

    def __init__(self):
        self.handles: list = []
        self.note = ""
        self._nvml, why = open_nvml()
        if self._nvml is None:
            self.note = f"no GPU monitoring ({why})"
            return
        try:
            self.handles = [
                self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(self._nvml.nvmlDeviceGetCount())
            ]
        except Exception as e:  # noqa: BLE001 - a driver that answers init but not queries
            self.note = f"no GPU monitoring ({type(e).__name__}: {e})"
        if not self.handles and not self.note:
            self.note = "NVML sees no GPU"

    def sample(self) -> list[dict]:
        out = []
        for i, h in enumerate(self.handles):
            n = self._nvml
            try:
                mem = n.nvmlDeviceGetMemoryInfo(h)
                util = n.nvmlDeviceGetUtilizationRates(h)
                try:
                    procs = len(n.nvmlDeviceGetComputeRunningProcesses(h))
                except Exception:  # not supported on every driver
                    procs = None
                out.append(
                    {
                        "index": i,
                        "mem_used_gib": mem.used / GIB,
                        "mem_total_gib": mem.total / GIB,
                        "util_pct": float(util.gpu),
                        "processes": procs,
                    }
                )
            except Exception as e:
                self.note = f"NVML read failed ({type(e).__name__}: {e})"
        return out


def tree_rss_gib(pids: Iterable[int]) -> float | None:
    """Resident memory of these processes and all their descendants."""
    total, seen = 0, False
    for pid in pids:
        try:
            root = psutil.Process(pid)
            for p in [root, *root.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                    seen = True
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
    return total / GIB if seen else None


def sample_system(pids: Iterable[int] = (), nvml: NvmlReader | None = None) -> dict:
    """One reading: CPU %, host memory, the RSS of the run's process tree, and each GPU."""
    vm = psutil.virtual_memory()
    return {
        "t": time.time(),
        "cpu_pct": psutil.cpu_percent(interval=None),
        "host_used_gib": (vm.total - vm.available) / GIB,
        "host_total_gib": vm.total / GIB,
        "run_rss_gib": tree_rss_gib(pids),
        "gpus": nvml.sample() if nvml else [],
        "gpu_note": nvml.note if nvml else "GPU monitoring off",
    }


class SystemMonitor:
    """Calls `callback(sample)` about every `interval_s` on a thread, between start() and stop()."""

    def __init__(self, callback: Callable[[dict], None], interval_s: float = 1.0):
        self.callback, self.interval_s = callback, interval_s
        self.pids: list[int] = []
        self._nvml: NvmlReader | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples = 0

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, pids: Iterable[int] = ()) -> None:
        self.pids = list(pids)
        if self.running:
            return
        if self._nvml is None:
            self._nvml = NvmlReader()  # once per monitor
        psutil.cpu_percent(interval=None)  # the first call only primes the counter
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="system-monitor")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.callback(sample_system(self.pids, self._nvml))
                self.samples += 1
            except Exception:  # a monitor must never take the panel down
                pass

    def stop(self, timeout: float = 3.0) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t.is_alive() and threading.current_thread() is not t:
            t.join(timeout)
