"""What a step is bound by, and what to measure next, from the measured shares of its time.

    v = bound_by(shares, spread, cfg, device="cpu")
    v.bound_by     # 'data', 'compute', 'communication', 'optimizer' or 'framework overhead'
    v.text()       # the reason with the figures, and the next setting to measure

The rule, one place: the phases fall into five groups (data = data loading + host-to-device copy;
communication = the gradient all-reduce the step waits for; optimizer = the optimizer step;
framework overhead = the rest of the step plus the time in operators under SMALL_OP_US each;
compute = forward and backward less those small operators). A group other than compute is named
when its share of the step reaches its threshold (the largest share wins when several do); else
the step is bound by compute. Each threshold is where removing that time alone would give at least
the speedup 1 / (1 - threshold). The suggestion is a setting to measure with an A/B test (paired
rounds, an interval, the one verdict rule), never a promise that it is faster, and it says so; only
the precision comes from a measurement of this model already, its precision lesson, where one is kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..machine.cpu import usable_cores
from ..train.profiling import SMALL_OP_US

GROUPS = ("data", "compute", "communication", "optimizer", "framework overhead")
THRESHOLDS = {"data": 0.25, "communication": 0.25, "optimizer": 0.25, "framework overhead": 0.40}
NOTE_SHARE = 0.10  # a group this large is mentioned beside the verdict


def group_shares(phases_ms: dict, small_ops_ms: float = 0.0) -> dict:
    """Milliseconds per phase (and the small-operator time inside forward and backward) to the
    share of each group; the shares add up to 1."""
    total = sum(phases_ms.values()) or 1.0
    small = min(small_ops_ms, phases_ms.get("forward", 0) + phases_ms.get("backward", 0))
    ms = {
        "data": phases_ms.get("data", 0) + phases_ms.get("copy", 0),
        "compute": phases_ms.get("forward", 0) + phases_ms.get("backward", 0) - small,
        "communication": phases_ms.get("all_reduce", 0),
        "optimizer": phases_ms.get("optimizer", 0),
        "framework overhead": phases_ms.get("rest", 0) + small,
    }
    return {k: v / total for k, v in ms.items()}


@dataclass
class Verdict:
    bound_by: str
    shares: dict  # group -> median share over the profiled steps
    spread: dict = field(default_factory=dict)  # group -> (lowest, highest) share over the steps
    reason: str = ""
    try_next: str = ""
    changes: dict = field(default_factory=dict)  # the setting to A/B test, dotted field -> value
    also: list = field(default_factory=list)
    borderline: bool = False

    def text(self) -> str:
        lines = [f"bound by {self.bound_by}: {self.reason}"]
        if self.borderline:
            lines.append("  borderline: the share crossed its threshold in some profiled steps only")
        if self.also:
            lines.append("  also worth a look: " + ", ".join(self.also))
        lines.append(f"to measure next (a hypothesis, not measured by this profile): {self.try_next}")
        if self.changes:
            vs = " ".join(f"--b {k}={_arg(v)}" for k, v in self.changes.items())
            lines.append(f"  measure it: workbench ab --config CONFIG {vs}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {
            "bound_by": self.bound_by,
            "shares": {k: round(v, 4) for k, v in self.shares.items()},
            "reason": self.reason,
            "try_next": self.try_next,
            "changes": self.changes,
            "also": self.also,
            "borderline": self.borderline,
        }


def _arg(value) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def _pct(x: float) -> str:
    return f"{x:.0%}"


def bound_by(
    shares: dict, spread: dict | None, cfg: dict, device: str = "cpu", recommended_dtype: str | None = None
) -> Verdict:
    """The verdict for median group shares; `cfg` is the run's config as a dict (config.json)."""
    spread = spread or {}
    over = [g for g, t in THRESHOLDS.items() if shares.get(g, 0) >= t]
    group = max(over, key=lambda g: shares[g]) if over else "compute"
    share = shares.get(group, 0)
    lo, hi = spread.get(group, (share, share))
    limit = THRESHOLDS.get(group)
    if limit is not None:
        reason = (
            f"{group} takes {_pct(share)} of the step (threshold {_pct(limit)}; removing it "
            f"alone would give up to {1 / max(1e-9, 1 - share):.2f}x)"
        )
    else:
        reason = (
            f"forward and backward arithmetic take {_pct(share)} of the step, and no other "
            f"group reaches its threshold"
        )
    if group == "framework overhead":
        reason += f"; it counts the step outside its phases and operator calls under {SMALL_OP_US:g} us"
    borderline = limit is not None and lo < limit
    if limit is None:  # compute: borderline when another group came close in some step
        borderline = any(spread.get(g, (0, 0))[1] >= t for g, t in THRESHOLDS.items())
    also = [f"{g} {_pct(s)}" for g, s in shares.items() if g != group and s >= NOTE_SHARE]
    try_next, changes = advice(group, cfg, device, recommended_dtype)
    return Verdict(
        group,
        shares,
        spread,
        reason + f" ({_pct(lo)}-{_pct(hi)} over the profiled steps)",
        try_next,
        changes,
        also,
        borderline,
    )


def advice(group: str, cfg: dict, device: str, recommended_dtype: str | None) -> tuple[str, dict]:
    """The next thing to try for a group, in words, and the setting that does it."""
    loader, optim, prec = cfg.get("loader", {}), cfg.get("optim", {}), cfg.get("precision", {})
    gpu = device.startswith("cuda")
    if group == "data":
        if loader.get("num_workers", 0) == 0:
            per_rank = usable_cores() // max(1, cfg.get("distributed", {}).get("nproc", 1))
            workers = max(1, min(4, per_rank - 1))  # leave the training process a core
            return (
                "load batches in worker processes (loader.num_workers), so the next batch is "
                "prepared while this one trains; notebook 05 and `workbench loader sweep` find how "
                "many this machine's cores can feed"
                + ("; pin_memory lets the copy to the GPU overlap" if gpu else ""),
                {"loader.num_workers": workers, "loader.persistent_workers": True},
            )
        return (
            "the workers do not keep up: cache decoded samples (workbench.loading.decoded_cache), make "
            "each sample cheaper, or add workers if cores are free",
            {},
        )
    if group == "communication":
        return (
            "all-reduce less often per sample: a bigger batch per rank, or gradient accumulation "
            "(optim.grad_accum_steps: one all-reduce per optimizer step); on one machine, fewer "
            "ranks may be faster",
            {"optim.grad_accum_steps": 2 * optim.get("grad_accum_steps", 1)},
        )
    if group == "optimizer":
        if optim.get("impl", "auto") in ("auto", "for-loop"):
            return (
                "a multi-tensor or fused optimizer step (optim.impl 'foreach' or 'fused'); "
                "compare them with workbench.profile.optimizers.compare_optimizers",
                {"optim.impl": "foreach"},
            )
        return ("a bigger batch makes the optimizer's fixed cost per step a smaller share", {})
    if group == "framework overhead":
        if not cfg.get("compile", {}).get("enabled"):
            return (
                "many small operators: torch.compile (compile.enabled) fuses them, and a bigger "
                "batch gives each one more work"
                + ("; compile.mode 'reduce-overhead' also replays CUDA graphs" if gpu else ""),
                {"compile.enabled": True},
            )
        return ("a bigger batch gives each operator more work", {})
    if prec.get("dtype", "fp32") == "fp32" and recommended_dtype != "fp32":
        if recommended_dtype:  # measured on this model's own steps: the precision lesson
            return (
                f"mixed precision: the precision lesson measured {recommended_dtype} faster than fp32 "
                "on this model's own training steps here (workbench.hardware.lessons); if memory "
                "limits the batch, activation checkpointing (train.checkpoint) frees it",
                {"precision.dtype": recommended_dtype},
            )
        return (  # nothing measured for this model: say what to measure, recommend nothing
            "mixed precision, not measured for this model yet: its precision lesson "
            "(precision_lesson(cfg), notebook 01) times bf16 against fp32 on its own steps, and "
            "the line below does the same from a terminal",
            {"precision.dtype": "bf16"},
        )
    if not cfg.get("compile", {}).get("enabled"):
        return (
            "torch.compile (compile.enabled) can fuse the arithmetic's element-wise parts; if "
            "memory limits the batch, activation checkpointing (train.checkpoint) frees it",
            {"compile.enabled": True},
        )
    return (
        "the arithmetic itself: a smaller or more efficient model, or faster hardware "
        "(notebook 04's chooser)",
        {},
    )
