"""Which GPU for this model: from one step's FLOPs, bytes and memory, estimate the step time on each
GPU of the spec table and whether the training state fits in its memory.

    from workbench.hardware.chooser import choose
    choose(cost_of_config(cfg), dtype="bf16")   # a DataFrame, fastest first

The estimate is a roofline with stated efficiencies: time = max(FLOPs / (peak x compute_eff),
bytes / (bandwidth x memory_eff)) + ops x launch_us. Small models are launch-bound on every GPU,
which is the truth the estimate should show. Memory: fp32 weights and gradients (autocast keeps fp32
master weights), optimizer state, saved activations, plus a fixed allowance for the CUDA context.

With `ranks`, each row also says what one of that many ranks holds under DDP (all of it) and under
FSDP (1/ranks of the weights, gradients and optimizer state: the rows of every parameter split as
workbench.train.sharding does, which a run measures as `memory_per_rank`), each rank training the
config's batch, and whether that fits the GPU: "fits on 8 x 24 GiB with FSDP, not with DDP". Not
counted under FSDP: the one block whose parameters a rank gathers while it computes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ConfigError
from ..events import SAMPLES_PER_S
from ..machine.gpus import GPUS, GPUSpec
from ..train.flops import StepCost
from ..train.flops import memory_need_gib as training_memory_gib

GIB = 2**30
# What a run would use instead when a GPU lacks the dtype (bf16 on a V100: fp16 with a scaler).
FALLBACK = {
    "fp8": ("fp8", "bf16", "fp16", "fp32"),
    "bf16": ("bf16", "fp16", "fp32"),
    "fp16": ("fp16", "fp32"),
    "tf32": ("tf32", "fp32"),
    "fp32": ("fp32",),
    "int8": ("int8", "fp32"),
}


@dataclass(frozen=True)
class Assumptions:
    compute_eff: float = 0.5  # share of peak a well-fed training step's matmuls reach
    memory_eff: float = 0.8  # share of spec bandwidth a large copy reaches
    launch_us: float = 5.0  # per dispatched op: launch and framework overhead on a GPU
    context_gib: float = 1.0  # CUDA context, allocator slack, workspaces

    def __post_init__(self):
        for name in ("compute_eff", "memory_eff"):
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise ConfigError(f"chooser.{name} must be in (0, 1], got {v!r}")
        if self.launch_us < 0 or self.context_gib < 0:
            raise ConfigError(
                f"chooser.launch_us and chooser.context_gib must be >= 0, "
                f"got {self.launch_us!r} and {self.context_gib!r}"
            )


def memory_need_gib(cost: StepCost, batch_scale: float = 1.0, a: Assumptions = Assumptions()) -> dict:
    """GiB for weights, gradients, optimizer state and activations (activations grow with batch),
    plus the CUDA context allowance: the pre-launch check's rule (workbench.train.flops)."""
    return training_memory_gib(cost, batch_scale, a.context_gib)


def per_rank_need_gib(mem: dict, ranks: int, strategy: str) -> float:
    """GiB one of `ranks` ranks holds (memory_need_gib's parts): DDP keeps whole copies, FSDP a
    1/ranks shard of the weights, gradients and optimizer state; activations and the context stay."""
    state = mem["weights_gib"] + mem["grads_gib"] + mem["optimizer_gib"]
    shard = state / ranks if strategy == "fsdp" else state
    return shard + mem["total_gib"] - state


def per_rank(mem: dict, memory_gib: float, ranks: int | None) -> dict:
    """The per-rank columns of a chooser row ({} without `ranks`)."""
    if not ranks:
        return {}
    ddp, fsdp = (per_rank_need_gib(mem, ranks, s) for s in ("ddp", "fsdp"))
    return {
        "ranks": ranks,
        "rank_gib_ddp": ddp,
        "rank_gib_fsdp": fsdp,
        "fits_ddp": ddp <= memory_gib,
        "fits_fsdp": fsdp <= memory_gib,
    }


def fit_sentence(row: dict) -> str:
    """'fits on 8 x 24 GiB with FSDP, not with DDP' for a chooser row that has the per-rank columns."""
    where = f"{row['ranks']} x {row['memory_gib']:g} GiB ({row['gpu']})"
    ddp, fsdp = row["fits_ddp"], row["fits_fsdp"]
    if ddp and fsdp:
        return f"fits on {where} with DDP and with FSDP"
    if fsdp:
        return f"fits on {where} with FSDP, not with DDP"
    return f"does not fit on {where}, with DDP or FSDP ({row['rank_gib_fsdp']:.1f} GiB a rank)"


def estimate(
    cost: StepCost,
    gpu: GPUSpec,
    dtype: str = "bf16",
    batch_scale: float = 1.0,
    a: Assumptions = Assumptions(),
    ranks: int | None = None,
) -> dict:
    """One GPU's row: estimated step time, what bounds it, and whether the state fits."""
    if dtype not in FALLBACK:
        raise ConfigError(f"dtype must be one of {', '.join(FALLBACK)}, got {dtype!r}")
    used = next(d for d in FALLBACK[dtype] if gpu.peak(d) is not None)
    peak = gpu.peak(used)
    note = f"no {dtype} here: {used} rate" if used != dtype else ""
    flops = cost.flops * batch_scale
    act_traffic = 2 * cost.activation_bytes * cost.accum
    moved = cost.bytes_moved - act_traffic + act_traffic * batch_scale  # weights don't grow with batch
    compute_ms = flops / (peak * 1e12 * a.compute_eff) * 1e3
    memory_ms = moved / (gpu.bandwidth_gbs * 1e9 * a.memory_eff) * 1e3
    launch_ms = cost.ops * a.launch_us / 1e3
    step_ms = max(compute_ms, memory_ms) + launch_ms
    bound = (
        "launch"
        if launch_ms > max(compute_ms, memory_ms)
        else ("compute" if compute_ms >= memory_ms else "memory")
    )
    mem = memory_need_gib(cost, batch_scale, a)
    return {
        **per_rank(mem, gpu.memory_gib, ranks),
        "gpu": gpu.name,
        "dtype": used,
        "peak_tflops": peak,
        "step_ms": step_ms,
        "compute_ms": compute_ms,
        "memory_ms": memory_ms,
        "launch_ms": launch_ms,
        "bound": bound,
        SAMPLES_PER_S: cost.batch_size * batch_scale / (step_ms / 1e3),
        "need_gib": mem["total_gib"],
        "memory_gib": gpu.memory_gib,
        "fits": mem["total_gib"] <= gpu.memory_gib,
        "note": note,
    }


def choose(
    cost: StepCost,
    dtype: str = "bf16",
    batch_scale: float = 1.0,
    assumptions: Assumptions = Assumptions(),
    gpus: list[GPUSpec] | None = None,
    ranks: int | None = None,
):
    """Every GPU's estimate as a DataFrame: those where it fits first, fastest first; with `ranks`,
    what each rank holds under DDP and FSDP and whether it fits."""
    import pandas as pd

    if not batch_scale > 0:
        raise ConfigError(f"batch_scale must be > 0, got {batch_scale!r}")
    if ranks is not None and (isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1):
        raise ConfigError(f"ranks must be an integer >= 1, got {ranks!r}")
    rows = [estimate(cost, g, dtype, batch_scale, assumptions, ranks) for g in (gpus or GPUS)]
    df = pd.DataFrame(rows)
    return df.sort_values(["fits", "step_ms"], ascending=[False, True]).reset_index(drop=True)
