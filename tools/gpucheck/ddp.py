"""Part "ddp": distributed training on the GPU through the launcher, and what a stop and a killed rank
leave behind.

- NCCL: with two or more GPUs, two ranks over NCCL through the launcher. With one GPU the launcher
  runs a single process and forms no process group (world size 1), so NCCL itself is started with
  one rank by the all-reduce program under torchrun (workbench.hardware.allreduce).
- Two ranks over gloo: with one GPU they share it (the launcher refuses NCCL there, one GPU per
  rank); each rank's device memory comes from its own events, and DDP must leave equal weights.
- A stop and a rank killed with SIGKILL: no process of the run is left, and NVML sees the device
  memory come back to what it was before the run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil
import torch

from workbench.config import DataConfig, LoaderConfig, ModelConfig, RunConfig, RunSection
from workbench.distributed.launch import run as launch_run
from workbench.distributed.launch import start_run
from workbench.events import (
    DONE,
    EVENT,
    MEM_PEAK_GIB,
    MEM_RESERVED_GIB,
    PID,
    RANK,
    SAMPLES_PER_S,
    START,
    STEP,
    STEP_NUMBER,
    read_events,
)
from workbench.hardware.allreduce import run_allreduce
from workbench.machine.capability import unsupported_reason
from tools.rounds import speed_config
from .gpumem import DeviceMemory
from .training import refusal

STEPS, LONG = 30, 100_000  # a run that completes; one that runs until it is stopped or killed
FIRST_STEPS_S = 90.0  # for the ranks of a long run to report their first steps
GONE_S = 10.0  # every process of an ended run must be gone within this
ENDED_S = 45.0  # for a stopped run, or one whose rank was killed, to end


def small_config(nproc: int = 1, backend: str = "auto", steps: int = STEPS) -> RunConfig:
    cfg = RunConfig(
        model=ModelConfig("transformer", width=512, depth=2, heads=8),
        data=DataConfig(name="text", seq_len=256, num_samples=512),
        loader=LoaderConfig(batch_size=16),
        run=RunSection(steps=steps, device="cuda", eval_batches=0, save_weights=False, mem_every_s=0.25),
    )
    bf16 = unsupported_reason(cfg, torch.device("cuda"), "bf16") is None
    return cfg.replace(
        **{
            "distributed.nproc": nproc,
            "distributed.backend": backend,
            "distributed.timeout_s": 20.0,
            "precision.dtype": "bf16" if bf16 else "fp32",
        }
    )


def rank_ends(run_dir) -> dict[int, dict]:
    """Each rank's last `done` record: its memory figures and parameter sum."""
    return {int(r[RANK]): r for r in read_events(run_dir) if r.get(EVENT) == DONE}


def first_steps(handle, ranks: int, step: int = 3, timeout_s: float = FIRST_STEPS_S) -> None:
    """Wait until `ranks` ranks have reported `step` steps; RuntimeError if the run ends or stalls."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = {}
        for r in read_events(handle.run_dir):
            if r.get(EVENT) == STEP:
                seen[r[RANK]] = max(seen.get(r[RANK], 0), r[STEP_NUMBER])
        if len([s for s in seen.values() if s >= step]) >= ranks:
            return
        if not handle.running():
            raise RuntimeError(f"the run ended before its first steps: {handle.summary().get('message')}")
        time.sleep(0.2)
    raise RuntimeError(f"{ranks} rank(s) did not reach step {step} within {timeout_s:.0f} s")


def run_pids(handle) -> dict[str, list[int]]:
    """The run's processes now: the supervisor, everything under it, and each rank's own pid."""
    tree = [handle.proc.pid]
    try:
        tree += [p.pid for p in psutil.Process(handle.proc.pid).children(recursive=True)]
    except psutil.Error:
        pass
    ranks = {int(r[RANK]): r[PID] for r in read_events(handle.run_dir) if r.get(EVENT) == START}
    return {"tree": sorted(set(tree) | set(ranks.values())), "ranks": [ranks[k] for k in sorted(ranks)]}


def left_alive(pids: list[int], timeout_s: float = GONE_S) -> list[int]:
    """The pids still running (not zombies) after waiting up to `timeout_s` for them to go."""

    def alive(pid):
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    deadline = time.monotonic() + timeout_s
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def nccl(ctx, rec) -> None:
    gpus = torch.cuda.device_count()
    if gpus >= 2:
        s = launch_run(speed_config(small_config(2, "nccl"), "ddp-nccl-2r"), timeout_s=ctx.left())
        ok = s.get("status") == "completed"
        rec.item(
            "nccl, 2 ranks",
            "ok" if ok else "failed",
            samples_per_s=s.get(SAMPLES_PER_S),
            ranks=rank_memory(s["run_dir"]),
            run_dir=s["run_dir"],
            **({} if ok else {"reason": s.get("message", "")}),
        )
        return
    c = run_allreduce(1, "cuda", mib=64, timeout_s=min(90.0, ctx.left()))
    rec.item(
        "nccl, 1 rank",
        "ok",
        backend=c.note.rsplit(" ", 1)[-1],
        median_ms=c.median_ms,
        mib=64,
        note="a 1-rank run through the launcher forms no process group, so NCCL is "
        "started here by the all-reduce program under torchrun with one rank",
    )


def rank_memory(run_dir) -> dict:
    return {
        str(rank): {k: r.get(k) for k in (MEM_PEAK_GIB, MEM_RESERVED_GIB, "param_sum", SAMPLES_PER_S)}
        for rank, r in rank_ends(run_dir).items()
    }


def gloo_two_ranks(ctx, rec) -> None:
    refused = refusal(small_config(2, "nccl"))
    s = launch_run(speed_config(small_config(2, "gloo"), "ddp-gloo-2r"), timeout_s=ctx.left())
    ranks = rank_memory(s["run_dir"])
    sums = [r["param_sum"] for r in ranks.values() if r.get("param_sum") is not None]
    problems = []
    if s.get("status") != "completed":
        problems.append(f"the run ended {s.get('status')}: {s.get('message', '')}")
    with_memory = sum(r.get(MEM_PEAK_GIB) is not None for r in ranks.values())
    if with_memory != 2:
        problems.append(f"expected device memory in the events of 2 ranks, found it in {with_memory}")
    if len(sums) == 2 and abs(sums[0] - sums[1]) > 1e-3 * max(1.0, abs(sums[0])):
        problems.append(f"the ranks' weights differ after DDP: parameter sums {sums}")
    rec.item(
        "gloo, 2 ranks" + (" sharing the GPU" if torch.cuda.device_count() == 1 else ""),
        "failed" if problems else "ok",
        nccl_refused=refused,
        samples_per_s=s.get(SAMPLES_PER_S),
        ranks=ranks,
        run_dir=s["run_dir"],
        **({"reason": "; ".join(problems)} if problems else {}),
    )


def ended_clean(ctx, name: str, nproc: int, end) -> dict:
    """Start a long run, let it step, end it with `end(handle, pids)`, then check what is left."""
    mem = DeviceMemory(ctx.device.index)
    before = mem.used_gib()
    procs_before = mem.processes()
    backend = "auto" if nproc == 1 else ("nccl" if torch.cuda.device_count() >= nproc else "gloo")
    handle = start_run(speed_config(small_config(nproc, backend, LONG), name.replace(" ", "-")))
    try:
        first_steps(handle, nproc, timeout_s=min(FIRST_STEPS_S, max(ctx.left() - 10, 1.0)))
        pids = run_pids(handle)
        during = mem.used_gib()
        t0 = time.monotonic()
        end(handle, pids)
        try:
            handle.wait(min(ENDED_S, max(ctx.left(), 1.0)))
            end_s = round(time.monotonic() - t0, 2)
        except subprocess.TimeoutExpired:
            end_s = None  # still going: stopped below, and the status says it did not end
    finally:
        if handle.running():
            handle.stop("the GPU check ran out of time")
    summary = handle.summary()
    left = left_alive(pids["tree"])
    freed = mem.back_to(before)
    procs_after = mem.processes()
    fields = {
        "run_status": summary.get("status"),
        "cause": summary.get("cause"),
        "failed_rank": summary.get("failed_rank"),
        "message": summary.get("message"),
        "pids": pids,
        "left_alive": left,
        "ended_after_s": end_s,
        "nvml_during_gib": during,
        "nvml_processes_before": None if procs_before is None else len(procs_before),
        "nvml_processes_after": None if procs_after is None else len(procs_after),
        **freed,
        "run_dir": str(handle.run_dir),
    }
    return fields


def stop_check(ctx, rec) -> None:
    fields = ended_clean(ctx, "ddp stop", 1, lambda h, pids: h.stop("stopped by the GPU check"))
    problems = _problems(fields, want_status="stopped")
    rec.item(
        "stop",
        "failed" if problems else "ok",
        **fields,
        **({"reason": "; ".join(problems)} if problems else {}),
    )


def kill_check(ctx, rec) -> None:
    fields = ended_clean(ctx, "ddp kill", 2, lambda h, pids: os.kill(pids["ranks"][1], signal.SIGKILL))
    problems = _problems(fields, want_status="failed")
    if fields["cause"] != "killed" or fields["failed_rank"] != 1:
        problems.append(
            f"the summary should name rank 1 killed, got cause {fields['cause']!r}, "
            f"rank {fields['failed_rank']!r}"
        )
    rec.item(
        "SIGKILL rank 1",
        "failed" if problems else "ok",
        **fields,
        **({"reason": "; ".join(problems)} if problems else {}),
    )


def _problems(fields: dict, want_status: str) -> list[str]:
    out = []
    if fields["run_status"] != want_status:
        out.append(f"the run should have ended {want_status}, got {fields['run_status']}")
    if fields["left_alive"]:
        out.append(f"processes left running: {fields['left_alive']}")
    if fields.get("freed") is False:
        out.append(
            f"device memory did not come back: {fields['nvml_after_gib']} GiB used after, "
            f"{fields['nvml_before_gib']} GiB before"
        )
    return out


def run(ctx, rec) -> None:
    checks = (
        ("nccl", nccl),
        ("gloo, 2 ranks", gloo_two_ranks),
        ("stop", stop_check),
        ("SIGKILL rank 1", kill_check),
    )
    for name, check in checks:
        try:
            check(ctx, rec)
        except Exception as e:  # noqa: BLE001 - one check failing must not hide the others
            rec.item(name, "failed", reason=f"{type(e).__name__}: {e}"[:400])
    rec.summary = "; ".join(f"{i['name']} {i['status']}" for i in rec.items)
