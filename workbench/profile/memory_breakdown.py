"""The memory breakdown of a profiled step: what the worker counted from the tensors (parameters,
gradients, optimizer state, saved activations per module) set beside the chooser's estimate for the
same step (`workbench.hardware.chooser.memory_need_gib`, from one counted step), and on a GPU the
allocator's and NVML's figures.

    m = memory_breakdown(rank_profile.memory)
    m.rows          # [{'part': 'parameters', 'measured_bytes': ..., 'estimate_bytes': ...}, ...]
    m.bytes         # {'parameters': ..., 'gradients': ..., 'optimizer_state': ..., 'activations': ...}
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..events import WORLD_SIZE
from ..hardware.chooser import GIB, Assumptions, memory_need_gib
from ..train.flops import StepCost

PARTS = {
    "parameters": "weights_gib",
    "gradients": "grads_gib",
    "optimizer_state": "optimizer_gib",
    "activations": "activations_gib",
}


def mib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.2f} MiB"


@dataclass
class MemoryBreakdown:
    bytes: dict  # part -> measured bytes
    estimate: dict  # part -> the chooser's bytes (empty when the step could not be counted)
    per_module: dict  # module -> saved activation bytes, largest first
    device: dict  # allocator / NVML / RSS figures, bytes
    notes: list = field(default_factory=list)
    micro_batch: int = 0
    accum: int = 1
    effective_batch_activations: int | None = None  # measured in one pass of the effective batch
    context_bytes: int = 0  # the chooser's allowance for the CUDA context
    checkpointed: list = field(default_factory=list)  # module names under activation checkpointing
    # what the pre-launch check measured of a rank before its model: {'base_rss_gib', 'data_rss_gib'}
    before_model: dict = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.bytes.values())

    @property
    def rows(self) -> list[dict]:
        rows = [
            {"part": p, "measured_bytes": b, "estimate_bytes": self.estimate.get(p)}
            for p, b in self.bytes.items()
        ]
        rows.append(
            {
                "part": "total",
                "measured_bytes": self.total,
                "estimate_bytes": sum(self.estimate.values()) if self.estimate else None,
            }
        )
        return rows

    def as_dict(self) -> dict:
        return {
            "bytes": self.bytes,
            "estimate_bytes": self.estimate,
            "per_module": self.per_module,
            "device": self.device,
            "notes": self.notes,
            "micro_batch": self.micro_batch,
            "accum": self.accum,
            "effective_batch_activations": self.effective_batch_activations,
            "estimate_context_bytes": self.context_bytes,
            "checkpointed": self.checkpointed,
            "peak_parts": self.peak_parts(),
        }

    def peak_parts(self) -> dict[str, int]:
        """On a CPU, the process's peak split into named parts (bytes): Python and torch as loaded,
        the data, the step's tensors as counted, and the rest, which no tensor count sees (operators'
        temporaries, memory the allocator keeps after freeing it). Empty without a measured peak."""
        peak = self.device.get("peak_rss_bytes")
        if not peak or "peak_allocated_bytes" in self.device:
            return {}
        base = int(self.before_model.get("base_rss_gib", 0) * 2**30)
        data = int(self.before_model.get("data_rss_gib", 0) * 2**30)
        parts = {
            "Python and torch, loaded (the pre-launch check's base)": base,
            "the data (the pre-launch check's)": data,
            "the step's tensors (counted above)": self.total,
        }
        parts["the rest: operators' temporaries and memory freed but kept by the allocator"] = max(
            0, peak - sum(parts.values())
        )
        return parts

    def peak_sentence(self) -> str | None:
        """Why the process's peak is larger than the step's tensors, part by part."""
        parts = self.peak_parts()
        if not parts:
            return None
        split = " + ".join(f"{name} {mib(b)}" for name, b in parts.items())
        peak = mib(self.device["peak_rss_bytes"])
        return f"the process's peak when the profiled steps ended, {peak} = {split}"

    def accumulation_sentence(self) -> str | None:
        """What gradient accumulation bought: the effective batch, and what it would cost at once."""
        if self.accum <= 1:
            return None
        eff = self.micro_batch * self.accum
        text = (
            f"gradient accumulation: an effective batch of {eff} ({self.accum} micro-batches of "
            f"{self.micro_batch}) keeps the activations of one micro-batch, "
            f"{mib(self.bytes['activations'])}"
        )
        if self.effective_batch_activations:
            text += (
                f"; the batch of {eff} in one pass saves {mib(self.effective_batch_activations)} (measured)"
            )
        return text


def memory_breakdown(memory: dict, before_model: dict | None = None) -> MemoryBreakdown:
    """From the `memory` section of a profile_rank*.json."""
    measured = {p: int(memory.get(p, 0)) for p in PARTS}
    notes = []
    estimate: dict = {}
    context = 0
    if "estimate_cost" in memory:
        fields = {f.name for f in dataclasses.fields(StepCost)}
        cost = StepCost(**{k: v for k, v in memory["estimate_cost"].items() if k in fields})
        need = memory_need_gib(cost)
        estimate = {p: int(round(need[key] * GIB)) for p, key in PARTS.items()}
        context = int(Assumptions().context_gib * GIB)
    else:
        notes.append(f"no estimate: {memory.get('estimate_error', 'the step was not counted')}")
    acts = memory.get("activations_measured", {})
    per_module = dict(sorted(acts.get("per_module", {}).items(), key=lambda kv: -kv[1]))
    if memory.get("checkpointed"):
        notes.append(
            f"checkpointed: {', '.join(memory['checkpointed'])} (they keep "
            f"{mib(acts.get('kept_for_recompute'))} of inputs for the recompute)"
        )
    if memory.get("eager"):
        notes.append("activations were measured on the eager model; torch.compile may save others")
    if memory.get(WORLD_SIZE, 1) > 1:
        notes.append("under DDP the reducer's buckets hold another copy of the gradients (not counted)")
    return MemoryBreakdown(
        measured,
        estimate,
        per_module,
        memory.get("device_memory", {}),
        notes,
        memory.get("micro_batch", 0),
        memory.get("accum", 1),
        memory.get("activations_effective_batch"),
        context,
        memory.get("checkpointed", []),
        before_model or {},
    )
