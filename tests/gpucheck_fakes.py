"""Fakes for the GPU check's tests: torch.cuda answering as one GPU, a pynvml module with the
readings NVML gives, a part's context, and a launcher that writes real run folders without training."""

from __future__ import annotations

import json
import sys
import time
import types

import torch

from workbench.events import EventWriter
from tools.gpucheck import runner
from workbench.runstore import create_run_dir

GIB = 2**30


class FakeNVML(types.ModuleType):
    """One GPU with `used_gib` in use out of 141, at `util` %, running the processes in `pids`."""

    NVML_CLOCK_SM = 1
    NVML_P2P_CAPS_INDEX_NVLINK = 2
    NVML_P2P_STATUS_OK = 0

    def __init__(self, used_gib=1.0, util=0.0, pids=()):
        super().__init__("pynvml")
        self.used_gib, self.util, self.pids = used_gib, util, list(pids)

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"h{i}"

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(used=int(self.used_gib * GIB), total=141 * GIB)

    def nvmlDeviceGetUtilizationRates(self, h):
        return types.SimpleNamespace(gpu=self.util)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [types.SimpleNamespace(pid=p, usedGpuMemory=GIB) for p in self.pids]

    def nvmlSystemGetDriverVersion(self):
        return "570.86.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12080

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1980

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return 700000


def fake_gpu(monkeypatch, name="NVIDIA H200", capability=(9, 0), nvml=None) -> FakeNVML:
    """torch.cuda answering as a machine with one GPU of this name and capability."""
    props = types.SimpleNamespace(name=name, multi_processor_count=132, total_memory=141 * GIB)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i=None: props)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: name)
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda a, b: False)
    nvml = nvml or FakeNVML()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    return nvml


def context(tmp_path, budget_s=600.0, **kw) -> runner.Context:
    return runner.Context(
        tmp_path / "out",
        deadline=time.monotonic() + budget_s,
        device=torch.device("cuda", 0),
        log=lambda msg: None,
        **kw,
    )


class FakeLauncher:
    """Stands in for the launcher's `run`: writes a real run folder (config, rank 0's events with a
    time per step, summary.json) and returns the summary a worker would, at `rates` samples/s by
    precision, a little different every call, so the check's own logic judges what it is given."""

    def __init__(self, rates=None, fail=(), param_sums=None):
        self.rates = rates or {"fp32": 100.0, "tf32": 210.0, "bf16": 330.0, "fp16": 300.0}
        self.fail = set(fail)
        self.param_sums = param_sums  # per rank; equal by default, as DDP leaves them
        self.calls: list[tuple[str, float | None]] = []
        self.configs: list = []
        self.off = {}  # part -> bytes every rank measures beyond the prediction
        self.peak_over_predicted = 1.25  # each rank's allocator peak over its predicted peak

    def memory_per_rank(self, cfg) -> dict:
        """What a worker records: each rank's predicted parts (the whole model's over the ranks)
        and peak (1 GiB once set up, plus the parts), the same measured (plus `off`) and a peak."""
        ranks = cfg.distributed.world_size
        whole = {"parameters": 800 * 2**20, "gradients": 800 * 2**20, "optimizer": 1600 * 2**20}
        predicted = [
            {"rank": r, **{k: v // ranks for k, v in whole.items()}, "activations": 512 * 2**20}
            for r in range(ranks)
        ]
        for p in predicted:
            p["peak"] = GIB + sum(v for k, v in p.items() if k != "rank")
        measured = [
            {
                **p,
                **{k: p[k] + b for k, b in self.off.items()},
                "peak": int(self.peak_over_predicted * p["peak"]),
            }
            for p in predicted
        ]
        return {
            "strategy": cfg.distributed.strategy if ranks > 1 else "one process",
            "predicted": predicted,
            "measured": measured,
            "not_measured": [],
            "not_predicted": [],
        }

    def __call__(self, cfg, run_dir=None, timeout_s=None, env=None, threads=None) -> dict:
        self.calls.append((cfg.run.label, timeout_s))
        self.configs.append(cfg)
        path = create_run_dir(cfg)
        p = cfg.precision
        rate = self.rates["tf32" if p.dtype == "fp32" and p.tf32 else p.dtype]
        rate *= 1 + 0.01 * (len(self.calls) % 5)
        events = EventWriter(path, 0)
        events.write("start", pid=12345)
        step_ms = cfg.loader.batch_size / rate * 1e3
        for step in range(1, cfg.run.steps + 1):
            events.write("step", step=step, loss=1.0, step_time_ms=step_ms * (1 + 0.01 * (step % 3)))
        failed = cfg.run.label in self.fail
        summary = {
            "status": "failed" if failed else "completed",
            "samples_per_s": rate,
            "step_time_ms_median": step_ms,
            "threads": 1,
            "precision": p.dtype,
            "mfu_spec": rate / 1000,
            "tflops": rate,
            "spec_tflops": 990.0,
            "mem_peak_gib": 2.5,
            "mem_reserved_gib": 3.0,
            "contention": {"other_cpu_cores": 0.0, "steal_frac": 0.0, "busy": False},
            "memory_per_rank": self.memory_per_rank(cfg),
        }
        if failed:
            summary["message"] = "rank 0 raised RuntimeError: injected"
        if p.dtype == "fp16":
            summary.update(skipped_steps=1, grad_scale=32768.0, nonfinite_losses=0)
        events.close()
        for rank in range(cfg.distributed.world_size):
            end = EventWriter(path, rank)
            if failed:
                end.write("error", status="failed", message="injected")
            else:
                end.write(
                    "done",
                    mem_peak_gib=2.5,
                    mem_reserved_gib=3.0,
                    samples_per_s=rate,
                    param_sum=(self.param_sums or [1.5] * 8)[rank],
                )
            end.close()
        (path / "summary.json").write_text(json.dumps(summary))
        return {"run_dir": str(path), "returncode": 1 if failed else 0, **summary}
