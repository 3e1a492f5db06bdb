"""The instrumented training loop every run uses, one process per rank, in three parts: `setup`
(device, process group, data, model, the contract check on one batch, optimizer), `run_steps`
(the timed loop, one event a step) and `finish` (summary figures, evaluation, saved weights).
`Phase` says which of these a rank is in, so an error names it ("building the model", "step 3").
A run whose final loss is not finite has diverged (`outcome`).

Per step it costs two perf_counter reads, the `loss.item()` any loop makes, and one short JSON line;
memory is read on a timer (run.mem_every_s), never per step.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ..config import ConfigError, RunConfig
from ..disk import write_atomic
from ..events import (
    ADDRESSES,
    GRAD_SCALE,
    INIT,
    MEM_ALLOCATED_GIB,
    NONFINITE_LOSSES,
    RANK,
    READY,
    RESUMED,
    SKIPPED_STEPS,
    WORLD_SIZE,
    EventWriter,
)
from ..runfolder import RunFolder, Summary
from ..measure.steps import step_stats
from ..measure.warmup import warmup_steps
from ..machine.contention import ContentionMeter, run_tree_pid
from ..machine.allocator import allocator_in_use
from ..machine.threads import threads_for, wait_policy
from . import footprint, memory_readings
from .budget import TimeBudget, ended_note
from .activation_checkpointing import apply_checkpointing
from .contract import check_model
from .data import DataBundle, build_data, make_loader
from .mfu import MfuMeter
from .models import build_model, loss_fn
from .precision import apply_backend_flags, autocast, check_supported, grad_scaler
from .profiling import StepProfiler
from .sharding import (
    MEMORY_PARTS,
    MID_STEP,
    PARAMETERS,
    PEAK,
    apply_fsdp,
    comm_bytes,
    held_bytes,
    per_rank_bytes,
    policy_compute,
)
from .resume import restore_state, save_state
from .state_index import refuse_nothing_to_train
from .rank import RankEnv, join_group, leave_group, pick_device, unwrap
from .step import StepParts, cycle_batches, make_optimizer, train_step
from .thread_trial import TrialSteps
from .instruments import PhaseNames, Profiling, StepEvents, WarmupEnd
from .loop import run_loop


@dataclass
class Phase:
    """What this rank is doing now; the worker's error record names it."""

    name: str = "starting"


@dataclass
class Setup:
    """Everything the loop needs, built once before the first step."""

    parts: StepParts  # the model, the optimizer and the rest of what every step runs on
    data: DataBundle
    batches: Iterator  # the training batches, cycling through epochs
    mfu: MfuMeter
    params: int
    t_launch: float
    contract: dict = field(default_factory=dict)  # what the check on one batch found
    memory_plan: list | None = None  # each rank's predicted bytes, workbench.train.sharding
    memory_base: int = 0  # what this rank held once set up, counted as its peak is
    comm_bytes: int = 0  # what its steps hold for communication (sharding.comm_bytes)


@dataclass
class Steps:
    """What the timed loop measured."""

    times: list = field(default_factory=list)
    waits: list = field(default_factory=list)
    losses: list = field(default_factory=list)
    skipped: int = 0
    nonfinite: int = 0
    first_nonfinite: int | None = None  # the step whose loss was first NaN or infinite
    first_step_s: float | None = None
    profiled: set = field(default_factory=set)  # steps run under the profiler: not in the figures
    contention: dict | None = None  # what other programs did during the timed steps (rank 0)
    resumed_from: int = 0  # the step a restarted attempt continued after (run.save_every)
    held: dict = field(default_factory=dict)  # bytes held mid-step: gradients, activations
    measured: int | None = None  # the step (from 1 in this attempt) that measured them: untimed
    thread_trial: dict | None = None  # the warm-up's thread counts and the one kept (busy machine)
    peak: int | None = None  # the process's peak when its steps ended (workbench.train.memory_readings)

    @property
    def done(self) -> int:
        """The run's steps so far, those of earlier attempts it resumed from included."""
        return self.resumed_from + len(self.times)


def threads_why(run_dir) -> dict:
    """Why the launcher chose these threads (launch.json: written as the run starts); {} for a
    rank started by hand or by a job file."""
    try:
        return {"threads_why": RunFolder(run_dir).launch()["threads"]["why"]}
    except (ConfigError, KeyError, TypeError):  # no launch record, or a damaged one
        return {}


def evaluate(model, loader, cfg, device, task, max_batches: int) -> dict:
    """Mean loss and accuracy (per token for a language model) over the held-out split."""
    model.eval()
    lossf = loss_fn(task)
    total_loss = correct = count = batches = 0
    with torch.no_grad(), autocast(cfg, device):
        for x, y in loader:
            if batches >= max_batches:
                break
            x, y = x.to(device), y.to(device)
            logits = model(x)
            total_loss += lossf(logits, y).float().item() * y.numel()
            correct += (logits.argmax(-1) == y).sum().item()
            count += y.numel()
            batches += 1
    model.train()
    if not count:
        return {}
    return {"eval_loss": total_loss / count, "eval_accuracy": correct / count}


def setup(cfg: RunConfig, events: EventWriter, env: RankEnv, phase: Phase | None = None) -> Setup:
    """Device, process group, data, model, contract check, FLOP count, DDP, compile, optimizer and
    loader, in the order the exported script repeats (so the same seed gives the same draws)."""
    phase = phase or Phase()
    phase.name = "setting up the device and the process group"
    t_launch = time.time()
    torch.set_num_threads(threads_for(cfg))  # fixed and recorded: every figure says its threads
    events.write(
        INIT,
        torch=torch.__version__,
        precision=cfg.precision.dtype,
        threads=torch.get_num_threads(),
        wait_policy=wait_policy(),
    )
    torch.manual_seed(cfg.run.seed)
    device = pick_device(cfg, env.local_rank)
    check_supported(cfg, device)
    apply_backend_flags(cfg, device)
    t_pg = time.time()
    addresses = join_group(cfg, env, device)
    init_pg_s = round(time.time() - t_pg, 3)  # the process group's rendezvous

    phase.name = f"building the data ({cfg.data.name})"
    data = build_data(cfg)
    phase.name = "building the model"
    model = build_model(cfg, data, check=False).to(device)
    if cfg.precision.channels_last:
        model = model.to(memory_format=torch.channels_last)
    phase.name = "checking the model on one batch"
    contract = check_model(model, data, device)  # its output adapter, or what does not fit
    params = sum(p.numel() for p in model.parameters())
    phase.name = "counting the FLOPs of a step"
    mfu = MfuMeter.for_run(cfg, model, data, device)  # FLOPs per step, counted once, no trace left
    apply_checkpointing(model, cfg.train.checkpoint)  # after the count: MFU leaves recompute out
    phase.name = "measuring the activations of one micro-batch (a forward pass)"
    with policy_compute(model, cfg, env.world_size):  # in the dtypes the ranks will compute in
        acts = footprint.batch_activations(
            model, cfg, data, loss_fn(data.task), autocast(cfg, device), device
        )["total"]  # whole model
    plan = per_rank_bytes(model, cfg, env.world_size, acts)  # from the whole model, before wrapping
    comm = comm_bytes(model, cfg, env.world_size)
    phase.name = f"wrapping the model ({cfg.distributed.strategy.upper()}, compile) and the optimizer"
    sharded = {}
    if env.world_size > 1:
        if cfg.distributed.strategy == "fsdp":
            sharded = {"fsdp_blocks": apply_fsdp(model, cfg)}
        else:
            model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    step_model = torch.compile(model, mode=cfg.compile.mode) if cfg.compile.enabled else model
    opt = make_optimizer(cfg, model)
    loader = make_loader(
        data.train, cfg, train=True, rank=env.rank, world_size=env.world_size, seed=cfg.run.seed
    )
    parts = StepParts(
        model,
        step_model,
        opt,
        grad_scaler(cfg, device),
        autocast(cfg, device),
        loss_fn(data.task),
        device,
        accum=cfg.optim.grad_accum_steps,
        world_size=env.world_size,
        channels_last=cfg.precision.channels_last,
        grad_clip=cfg.optim.grad_clip,
    )
    s = Setup(
        parts,
        data,
        cycle_batches(loader),
        mfu,
        params,
        t_launch,
        contract,
        plan,
        memory_readings.held_bytes_now(device),
        comm,
    )
    events.write(
        READY,
        device=str(device),
        params=params,
        task=data.task,
        train_samples=len(data.train),
        setup_s=round(time.time() - t_launch, 3),
        init_pg_s=init_pg_s,
        **contract,
        **sharded,
        **memory_readings.sample(device),
        **({ADDRESSES: addresses} if addresses else {}),
    )
    return s


def run_steps(
    cfg: RunConfig,
    s: Setup,
    events: EventWriter,
    env: RankEnv,
    profiler: StepProfiler | None = None,
    phase: Phase | None = None,
    run_dir=None,
    resumed_from: int = 0,
) -> Steps:
    """The timed loop (workbench.train.loop) with this rank's instruments attached: one `step`
    record per optimizer step, from the step after `resumed_from`; with run.save_every, every rank
    keeps its part of a resumable state in `run_dir` every that many steps."""
    phase = phase or Phase()
    out = Steps(resumed_from=resumed_from)
    warmup = resumed_from + warmup_steps(cfg.run.steps - resumed_from)
    meter = ContentionMeter(run_tree_pid()) if env.rank == 0 else None
    budget = TimeBudget(cfg.run.time_budget_s, env.world_size, s.parts.device)
    # a resumed run keeps the thread count its saved steps ran (restored with the state): a trial
    # would change the order of its sums, and its losses would leave the unbroken run's
    may_try = env.world_size == 1 and not resumed_from
    trial = TrialSteps.from_env(warmup - resumed_from, resumed_from + 1) if may_try else None
    hooks = [
        WarmupEnd(warmup, meter, budget, cfg.compile.enabled),
        PhaseNames(phase),
        Profiling(profiler, s.parts.model, out),
        *([trial] if trial else []),
        StepEvents(events, out, s, cfg.run.mem_every_s, cfg.precision.dtype == "fp16", cfg.run.steps),
    ]

    def save(step: int) -> None:
        phase.name = f"saving the resumable state after step {step}"
        save_state(s.parts, step, RunFolder(run_dir).resume_dir)

    run_loop(
        s.parts,
        s.batches,
        resumed_from + 1,
        cfg.run.steps,
        hooks,
        step_fn=train_step,
        # a compiled run's warm-up is its compile: the budget does not end it there
        spent=lambda step: (step > warmup or not cfg.compile.enabled) and budget.spent(),
        save_every=cfg.run.save_every if run_dir is not None else 0,
        save=save,
    )
    if trial is not None:
        out.thread_trial = trial.record()
    if meter is not None:
        out.contention = meter.read()
    return out


def finish(cfg: RunConfig, s: Setup, st: Steps, env: RankEnv, run_dir) -> Summary:
    """The summary figures; evaluation on the held-out split; rank 0 saves the weights."""
    accum = cfg.optim.grad_accum_steps
    summary = {
        "steps": st.done,
        **ended_note(cfg, st.done),
        "params": s.params,
        WORLD_SIZE: env.world_size,
        "device": str(s.parts.device),
        "precision": cfg.precision.dtype,
        "final_loss": st.losses[-1],
        "time_to_first_step_s": round(st.first_step_s, 3),
        "wall_s": round(time.time() - s.t_launch, 3),
        NONFINITE_LOSSES: st.nonfinite,
        "threads": torch.get_num_threads(),
        "wait_policy": wait_policy(),
        "allocator": allocator_in_use(),
        **s.contract,
    }
    summary.update(threads_why(run_dir))
    if st.thread_trial is not None:
        summary["thread_trial"] = st.thread_trial
        summary["threads_why"] = "; ".join(filter(None, (summary.get("threads_why"), st.thread_trial["why"])))
    if st.first_nonfinite is not None:
        summary["first_nonfinite_step"] = st.first_nonfinite
    if st.resumed_from:
        summary["resumed_from_step"] = st.resumed_from
    if st.contention is not None:
        summary["contention"] = st.contention
    summary.update(
        step_stats(
            st.times, st.waits, cfg.loader.batch_size * accum, env.world_size, st.profiled | {st.measured}
        )
    )
    summary.update(s.mfu.summary(summary["step_time_ms_median"]))
    if cfg.precision.dtype == "fp16":
        summary.update({SKIPPED_STEPS: st.skipped, GRAD_SCALE: s.parts.scaler.get_scale()})
    plain = unwrap(s.parts.model)
    if cfg.run.eval_batches:
        test_loader = make_loader(s.data.test, cfg, train=False)
        summary.update(evaluate(plain, test_loader, cfg, s.parts.device, s.data.task, cfg.run.eval_batches))
    summary["param_sum"] = param_sum(plain)  # equal on every rank when DDP kept them in sync
    mem = memory_readings.sample(s.parts.device)
    summary.update({k: v for k, v in mem.items() if k != MEM_ALLOCATED_GIB})
    if s.memory_plan is not None:  # every rank's bytes, gathered to rank 0's summary
        summary["memory_per_rank"] = memory_per_rank(cfg, s, env, st.held, st.peak)
    if cfg.run.save_weights:
        state = full_state(plain, cfg)  # under FSDP every rank gathers; rank 0 writes
        if env.rank == 0:
            buffer = io.BytesIO()  # serialised first, so a full disk is an OSError, not a torn file
            torch.save(state, buffer)
            write_atomic(RunFolder(run_dir).weights_file, buffer.getvalue())
    if env.world_size > 1 and dist.is_initialized():
        leave_group(s.parts.model)
    return summary


def train(cfg: RunConfig, events: EventWriter, env: RankEnv, run_dir, phase: Phase | None = None) -> Summary:
    """Train per the config, writing events as it goes; returns the summary figures."""
    phase = phase or Phase()
    s = setup(cfg, events, env, phase)
    resumed_from = 0
    if cfg.run.save_every or cfg.run.resume_from:
        phase.name = "loading the resumable state"
        resumed_from = restore_state(
            s,
            run_dir,
            cfg.optim.grad_accum_steps,
            resume_from=cfg.run.resume_from,
        )
        refuse_nothing_to_train(resumed_from, cfg.run.steps)  # a worker started by hand or a job
        if resumed_from:
            events.write(RESUMED, from_step=resumed_from)
    profiler = StepProfiler.for_run(cfg, env, s.parts.device, warmup_steps(cfg.run.steps))
    st = run_steps(cfg, s, events, env, profiler, phase, run_dir, resumed_from)
    # the peak the steps reached, read before the profiler's trace and the evaluation add their own
    st.peak = memory_readings.peak_bytes(s.parts.device)
    phase.name = "evaluating and saving the weights"
    profiled = profiler.close(s, run_dir)  # trace and breakdown, before the group is torn down
    return {**finish(cfg, s, st, env, run_dir), **profiled}


def outcome(summary: dict) -> dict:
    """How a run that ran every step ended: completed, or diverged when its final loss is NaN or
    infinite (the weights are then NaN too), with the message that says so."""
    loss = summary.get("final_loss")
    if loss is None or math.isfinite(loss):
        return {"status": "completed"}
    first = summary.get("first_nonfinite_step")
    return {
        "status": "diverged",
        "message": f"the loss became {loss} at step {first} and ended {loss} "
        f"({summary.get(NONFINITE_LOSSES)} of {summary.get('steps')} steps "
        "non-finite); lower optim.lr, clip gradients (optim.grad_clip) or use bf16 "
        "instead of fp16",
    }


def param_sum(model: torch.nn.Module) -> float:
    """The sum of every parameter, whole (under FSDP every rank gathers each one)."""
    with torch.no_grad():
        return sum(_whole(p.detach()).double().sum().item() for p in model.parameters())


def _whole(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def full_state(model: torch.nn.Module, cfg: RunConfig) -> dict:
    """The model's whole state on the CPU: plain, or gathered from every rank's shards (FSDP)."""
    if cfg.distributed.strategy == "fsdp" and dist.is_initialized():
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def memory_per_rank(
    cfg: RunConfig, s: Setup, env: RankEnv, mid_step: dict | None = None, peak: int | None = None
) -> dict:
    """Predicted and measured bytes per rank: parameters and optimizer state held (local shards),
    the gradients and saved activations held in one step (`mid_step`: they are freed at every
    step's end), and the peak (the allocator's on a GPU, the process's resident set on a CPU) when
    the steps ended (`peak`, read then) or now.
    The peak is predicted by each rank from what it held once set up, plus what its steps add:
    gradients, optimizer state, activations and communication buffers."""
    params_opt = held_bytes(unwrap(s.parts.model), s.parts.opt)
    mid_step = mid_step or {}
    held = {**params_opt, **{k: mid_step[k] for k in MID_STEP if k in mid_step}}
    held[PEAK] = peak if peak is not None else memory_readings.peak_bytes(s.parts.device)
    plan = s.memory_plan[env.rank]
    added = [k for k in MEMORY_PARTS if k != PARAMETERS]  # by the steps (AdamW's state is lazy)
    mine = {
        RANK: env.rank,
        **held,
        "predicted_peak": s.memory_base + s.comm_bytes + sum(plan.get(k, 0) for k in added),
    }
    measured: list = [None] * env.world_size
    if env.world_size > 1:
        dist.all_gather_object(measured, mine)
    else:
        measured = [mine]
    unpredictable = peak_unpredictable(s.parts.device)
    peaks = [m.pop("predicted_peak") for m in measured]
    predicted = [{**p, PEAK: None if unpredictable else peak} for p, peak in zip(s.memory_plan, peaks)]
    strategy = cfg.distributed.strategy if env.world_size > 1 else "one process"
    return {
        "strategy": strategy,
        "predicted": predicted,
        "measured": measured,
        "not_measured": [k for k in MID_STEP if k not in held],
        "not_predicted": [f"{PEAK} ({unpredictable})"] if unpredictable else [],
    }


def peak_unpredictable(device: torch.device) -> str:
    """Why a rank's peak cannot be predicted here ('' where it can): on a CPU the peak is the
    resident set, and the C library's malloc keeps freed block-sized buffers resident by an amount
    that depends on the order of frees (workbench.machine.allocator); tcmalloc reuses them, and a
    GPU's peak is its caching allocator's, which counts tensors."""
    if device.type != "cpu" or allocator_in_use() == "tcmalloc":
        return ""
    return (
        "the C library's malloc keeps freed buffers resident by an amount no count of tensors "
        "predicts; with tcmalloc installed (apt install libtcmalloc-minimal4) runs start with it "
        "and the peak is predicted"
    )
