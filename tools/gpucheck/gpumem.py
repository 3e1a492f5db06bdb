"""NVML's view of the GPU under check, for the parts that look at processes: the device's used memory
(every process on it, CUDA contexts and allocator caches included), its compute processes, a sampler
that records both through a run, and a wait for the memory to come back after processes ended.

    mem = DeviceMemory(0); base = mem.used_gib()
    with Sampler(mem) as s: ...run...;  s.window(t0, t1)   # {'nvml_peak_gib': ..., 'util_max_pct': ...}
    mem.back_to(base)                                        # {'freed': True, 'freed_after_s': 1.2, ...}

The allocator's own figures (torch.cuda.max_memory_allocated) are the runs' `mem_*_gib` fields; NVML
sees what the device has lent out, which is what no other process can have.
"""

from __future__ import annotations

import os
import time

from workbench.machine.gpu import GIB, open_nvml
from workbench.machine.monitor import NvmlReader, SystemMonitor

FREED_TOLERANCE_GIB = 0.25  # a process left behind holds at least its CUDA context, several hundred MiB


def _r(v: float | None, digits: int = 3) -> float | None:
    return None if v is None else round(v, digits)


def nvml_index(cuda_index: int = 0, environ=os.environ) -> int:
    """NVML numbers every GPU of the machine, CUDA only the visible ones: map through
    CUDA_VISIBLE_DEVICES when it lists indices (identity otherwise)."""
    visible = [v.strip() for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if cuda_index < len(visible) and visible[cuda_index].isdigit():
        return int(visible[cuda_index])
    return cuda_index


class DeviceMemory:
    """One GPU through NVML; `note` says why there are no readings (no pynvml, no driver)."""

    def __init__(self, cuda_index: int = 0):
        self.reader = NvmlReader()
        self.index = nvml_index(cuda_index)
        self.note = self.reader.note
        if not self.note and self.index >= len(self.reader.handles):
            self.note = f"NVML has no device {self.index} (it sees {len(self.reader.handles)})"

    @property
    def available(self) -> bool:
        return not self.note

    def reading(self) -> dict | None:
        """{'mem_used_gib', 'mem_total_gib', 'util_pct', 'processes'} or None."""
        if not self.available:
            return None
        readings = self.reader.sample()
        return readings[self.index] if self.index < len(readings) else None

    def used_gib(self) -> float | None:
        r = self.reading()
        return r["mem_used_gib"] if r else None

    def processes(self) -> list[dict] | None:
        """The compute processes NVML lists on this GPU: pid (the host's, which differs from ours
        inside a container) and the memory each holds."""
        nv, _ = open_nvml()
        if nv is None or not self.available:
            return None
        try:
            procs = nv.nvmlDeviceGetComputeRunningProcesses(self.reader.handles[self.index])
        except Exception:  # noqa: BLE001 - not every driver answers
            return None
        return [
            {"pid": p.pid, "used_gib": _r(p.usedGpuMemory / GIB) if p.usedGpuMemory else None} for p in procs
        ]

    def back_to(
        self, baseline_gib: float | None, timeout_s: float = 15.0, tolerance_gib: float = FREED_TOLERANCE_GIB
    ) -> dict:
        """Wait until the used memory is back within `tolerance_gib` of `baseline_gib`."""
        t0 = time.monotonic()
        used = self.used_gib()
        if baseline_gib is None or used is None:
            return {"freed": None, "nvml_note": self.note or "no baseline reading"}
        while used > baseline_gib + tolerance_gib and time.monotonic() - t0 < timeout_s:
            time.sleep(0.25)
            used = self.used_gib()
        freed = used <= baseline_gib + tolerance_gib
        return {
            "freed": freed,
            "nvml_before_gib": _r(baseline_gib),
            "nvml_after_gib": _r(used),
            "freed_after_s": round(time.monotonic() - t0, 2) if freed else None,
            "tolerance_gib": tolerance_gib,
        }


class Sampler:
    """NVML readings of the checked GPU about every `interval_s` on the monitor's thread (the same
    SystemMonitor the notebooks' panel uses): (wall time, used GiB, utilization %)."""

    def __init__(self, mem: DeviceMemory, interval_s: float = 0.25):
        self.mem = mem
        self.samples: list[tuple[float, float, float]] = []
        self.monitor = SystemMonitor(self._take, interval_s)

    def _take(self, sample: dict) -> None:
        gpus = sample.get("gpus") or []
        if self.mem.index < len(gpus):
            g = gpus[self.mem.index]
            self.samples.append((sample["t"], g["mem_used_gib"], g["util_pct"]))

    def __enter__(self) -> "Sampler":
        if self.mem.available:
            self.monitor.start()
        return self

    def __exit__(self, *exc) -> None:
        self.monitor.stop()

    def window(self, t0: float, t1: float) -> dict:
        """The peak of used memory and of utilization between two wall-clock times."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if not inside:
            return {
                "nvml_peak_gib": None,
                "util_max_pct": None,
                "nvml_samples": 0,
                "nvml_note": self.mem.note or "no NVML sample fell inside the run",
            }
        return {
            "nvml_peak_gib": _r(max(s[1] for s in inside)),
            "util_max_pct": max(s[2] for s in inside),
            "nvml_samples": len(inside),
        }
