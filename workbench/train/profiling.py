"""Profiled steps inside a run (`run.profile_steps`): the steps right after warm-up run under
torch.profiler, each part of the step inside its own range, and each rank writes what it saw to the
run folder: `trace_rank{R}.json` (Chrome/Perfetto: open it in https://ui.perfetto.dev) and
`profile_rank{R}.json` (the phases of every profiled step, the top operators, the memory breakdown).

The phases are the step's own ranges (train_step's `phase` hook): data, copy (host to device),
forward (with the loss), backward, optimizer. Under DDP the gradient all-reduce is the end of
backward: from the moment every gradient is computed (an autograd callback marks it) until backward
returns, the rank waits for the collective. "rest" is the step's range minus its phases. On a GPU
each phase synchronizes the device before its range closes, so a phase holds its kernels' time; that
removes the overlap of launching and running, and profiled steps are slower than the others. They
are marked in their step records and left out of the run's throughput and step-time figures.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace

import torch
from torch.autograd import Variable
from torch.profiler import ProfilerActivity, profile, record_function

from ..disk import write_json_atomic
from ..events import RANK, WORLD_SIZE
from ..runfolder import RunFolder
from . import footprint
from .activation_checkpointing import resolve
from .flops import step_cost
from .rank import unwrap
from .step import StepParts, train_step

PREFIX = "wb::"
PHASES = ("data", "copy", "forward", "backward", "all_reduce", "optimizer", "rest")
TOP_OPS = 25
SMALL_OP_US = 10.0  # an operator call whose own work is this short is mostly dispatch overhead


class StepProfiler:
    """Decides which steps are profiled, runs them under torch.profiler, writes what it found."""

    def __init__(self, cfg, env, device: torch.device, first: int, count: int):
        self.cfg, self.env, self.device = cfg, env, device
        self.steps = list(range(first, first + count))
        self.cuda = device.type == "cuda"
        self.prof = None
        self.running = False
        self.grad_bytes = 0
        self.memory: dict = {}
        self._model = None  # the step's (DDP-wrapped) model, whose gradients are counted

    @classmethod
    def for_run(cls, cfg, env, device, warmup: int) -> "StepProfiler":
        return cls(cfg, env, device, warmup + 1, cfg.run.profile_steps)

    def profiled(self, step: int) -> bool:
        return step in self.steps

    def step_fn(self, step: int):
        """train_step itself, or (on profiled steps) train_step inside the profiler's ranges. Starts
        and stops the profiler between steps, outside any step's timing."""
        if self.steps and step == self.steps[0]:
            self._start()
        elif self.running and step > self.steps[-1]:
            self._stop()
        return self._profiled_step if self.profiled(step) else train_step

    def _start(self) -> None:
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        self.prof = profile(activities=activities, record_shapes=True)
        self.prof.start()
        self.running = True

    def _stop(self) -> None:
        self.memory = footprint.device_memory(self.device)  # peaks of the profiled steps
        self.prof.stop()
        self.running = False

    def _profiled_step(self, parts: StepParts, batches):
        self._model = parts.model
        with record_function(PREFIX + "step"):
            return train_step(replace(parts, lossf=self._watch(parts.lossf)), batches, phase=self._phase)

    @contextmanager
    def _phase(self, name: str):
        if name == "optimizer":  # every gradient exists now (accumulated, all-reduced): count them
            self.grad_bytes = max(self.grad_bytes, footprint.gradient_bytes(self._model))
        with record_function(PREFIX + name):
            yield
            if self.cuda:
                torch.cuda.synchronize(self.device)

    def _watch(self, lossf):
        """The loss function, with a hook that marks the moment backward has every gradient."""

        def grads_ready():
            if self.cuda:
                torch.cuda.synchronize(self.device)
            with record_function(PREFIX + "grads_ready"):
                pass

        def started(grad):
            Variable._execution_engine.queue_callback(grads_ready)  # runs when backward is done

        def watched(logits, y):
            loss = lossf(logits, y)
            if loss.requires_grad:
                loss.register_hook(started)
            return loss

        return watched

    def close(self, s, run_dir) -> dict:
        """Stop the profiler if it still runs; write the trace and the breakdown. Returns the
        summary's fields about profiling ({} when nothing was profiled)."""
        if self.prof is None:
            return {}
        if self.running:
            self._stop()
        rank = self.env.rank
        folder = RunFolder(run_dir)
        trace = folder.trace_file(rank).name
        events = [e for e in self.prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
        steps = phases_per_step(events, self.env.world_size > 1)
        self.prof.export_chrome_trace(str(run_dir / trace))
        out = {
            RANK: rank,
            WORLD_SIZE: self.env.world_size,
            "device": str(self.device),
            "threads": torch.get_num_threads(),
            "profiled_steps": self.steps[: len(steps)],
            "steps": steps,
            "top_ops": top_ops(events, len(steps), self.cuda),
            "trace": trace,
            "memory": self._memory(s),
        }
        write_json_atomic(folder.profile_file(rank), out)
        self.prof = None
        return {"profiled_steps": out["profiled_steps"], "profile": folder.profile_file(rank).name}

    def _memory(self, s) -> dict:
        """Parameters, gradients and optimizer state counted from the tensors; activations from one
        forward pass on a batch read straight from the dataset (nothing else in the run changes)."""
        cfg, plain = self.cfg, unwrap(s.parts.model)
        mem = {
            "parameters": footprint.parameter_bytes(plain),
            "gradients": self.grad_bytes,
            "optimizer_state": footprint.optimizer_state_bytes(s.parts.opt),
            "optimizer": cfg.optim.name,
            "optimizer_impl": cfg.optim.impl,
            "checkpointed": resolve(plain, cfg.train.checkpoint),
            "micro_batch": cfg.loader.batch_size,
            "accum": cfg.optim.grad_accum_steps,
            "device_memory": self.memory,
            "eager": cfg.compile.enabled,
            WORLD_SIZE: self.env.world_size,
        }
        mem["activations_measured"] = self._activations(s, plain, cfg.loader.batch_size)
        mem["activations"] = mem["activations_measured"]["total"]
        if cfg.optim.grad_accum_steps > 1:  # what the same effective batch costs in one pass
            big = cfg.loader.batch_size * cfg.optim.grad_accum_steps
            if big <= len(s.data.train):
                mem["activations_effective_batch"] = self._activations(s, plain, big)["total"]
        try:
            mem["estimate_cost"] = step_cost(cfg, plain, s.data, s.parts.device).as_dict()
        except Exception as e:  # noqa: BLE001 - a model the FLOP counter cannot trace
            mem["estimate_error"] = f"{type(e).__name__}: {e}"[:200]
        return mem

    def _activations(self, s, plain, batch: int) -> dict:
        return footprint.batch_activations(
            plain, self.cfg, s.data, s.parts.lossf, s.parts.amp, s.parts.device, batch
        )


def _phase_of(e) -> str:
    while e is not None:
        if e.name.startswith(PREFIX) and e.name[len(PREFIX) :] in PHASES:
            return e.name[len(PREFIX) :]
        e = e.cpu_parent
    return "rest"


def phases_per_step(events, distributed: bool) -> list[dict]:
    """Milliseconds per phase for every profiled step, from the step's ranges."""
    ranges = sorted((e for e in events if e.name.startswith(PREFIX)), key=lambda e: e.time_range.start)
    marks = [e.time_range.start for e in ranges if e.name == PREFIX + "grads_ready"]
    out = []
    for st in (e for e in ranges if e.name == PREFIX + "step"):
        lo, hi = st.time_range.start, st.time_range.end
        ms = dict.fromkeys(PHASES, 0.0)
        for e in ranges:
            name = e.name[len(PREFIX) :]
            if name not in PHASES or e.cpu_parent is not st:
                continue
            dur = e.time_range.end - e.time_range.start
            if name == "backward" and distributed:
                ready = [m for m in marks if e.time_range.start <= m <= e.time_range.end]
                if ready:
                    wait = e.time_range.end - max(ready)
                    ms["all_reduce"] += wait / 1e3
                    dur -= wait
            ms[name] += dur / 1e3
        span = (hi - lo) / 1e3
        ms["rest"] = max(0.0, span - sum(ms.values()))
        small = sum(
            e.self_cpu_time_total
            for e in events
            if e.thread == st.thread
            and lo <= e.time_range.start <= hi
            and not e.name.startswith(PREFIX)
            and e.self_cpu_time_total < SMALL_OP_US
            and _phase_of(e) in ("forward", "backward")
        )
        out.append(
            {
                "span_ms": round(span, 4),
                "phases_ms": {k: round(v, 4) for k, v in ms.items()},
                "small_ops_ms": round(small / 1e3, 4),
            }
        )
    return out


def top_ops(events, steps: int, cuda: bool, n: int = TOP_OPS) -> list[dict]:
    """Operators by self time per profiled step, with their calls, input shapes and phase."""
    main = {e.thread for e in events if e.name == PREFIX + "step"}
    rows: dict[tuple, dict] = {}
    for e in events:
        if e.name.startswith(PREFIX):
            continue
        phase = _phase_of(e) if e.thread in main else "(another thread)"
        key = (e.name, str(e.input_shapes), phase)
        row = rows.setdefault(
            key,
            {
                "name": e.name,
                "input_shapes": str(e.input_shapes)[:120],
                "phase": phase,
                "calls": 0,
                "self_us": 0.0,
                "device_us": 0.0,
            },
        )
        row["calls"] += 1
        row["self_us"] += e.self_cpu_time_total
        if cuda:
            row["device_us"] += getattr(e, "self_device_time_total", 0.0)
    steps = max(1, steps)
    key = "device_us" if cuda else "self_us"
    ranked = sorted(rows.values(), key=lambda r: r[key], reverse=True)[:n]
    return [
        {
            "name": r["name"],
            "phase": r["phase"],
            "input_shapes": r["input_shapes"],
            "calls_per_step": round(r["calls"] / steps, 2),
            "self_ms_per_step": round(r["self_us"] / steps / 1e3, 4),
            **({"device_ms_per_step": round(r["device_us"] / steps / 1e3, 4)} if cuda else {}),
        }
        for r in ranked
    ]
