"""Part "monitor": the GPU's memory and utilization as NVML reports them, which is what the notebooks'
system monitor shows (workbench.machine.monitor).

1. Memory held by another process: a second process (tools.gpucheck.holder) allocates HOLD_MIB
   on the GPU. NVML must see the device's used memory rise by at least that much (the process's CUDA
   context comes on top), list the process, and see the memory come back when it exits.
2. A run sampled: a transformer run through the launcher, read by the SystemMonitor four times a
   second for SAMPLE_S seconds of steps; utilization and used memory must rise above the idle reading.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time

from workbench.distributed.launch import start_run
from tools.rounds import speed_config
from .ddp import LONG, first_steps, small_config
from .gpumem import DeviceMemory, Sampler

HOLD_MIB = 2048
SAMPLE_S = 4.0
READY_S = 60.0  # for the holder to start torch and allocate


def _ready_line(proc: subprocess.Popen, timeout_s: float) -> dict:
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        err = proc.stderr.read()[-400:] if proc.stderr else ""
        raise RuntimeError(
            f"the holder process did not report its allocation within {timeout_s:.0f} s"
            + (f": {err.strip()}" if err.strip() else "")
        )
    return json.loads(line)


def _readable(ctx, rec, name: str):
    """The device's memory reader and a first reading, or None (the check is skipped, saying why)."""
    mem = DeviceMemory(ctx.device.index)
    reading = mem.reading()
    if reading is None:
        rec.item(name, "skipped", reason=mem.note)
        return None
    return mem, reading


def hold_check(ctx, rec) -> None:
    name = "memory held by another process"
    if (found := _readable(ctx, rec, name)) is None:
        return
    mem, reading = found
    mib = int(min(HOLD_MIB, reading["mem_total_gib"] * 1024 * 0.1))
    before = reading["mem_used_gib"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tools.gpucheck.holder", "--mib", str(mib), "--device", str(ctx.device.index)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        info = _ready_line(proc, min(READY_S, max(ctx.left() - 5, 1.0)))
        seen = []
        for _ in range(4):
            seen.append(mem.used_gib())
            time.sleep(0.25)
        listed = mem.processes()
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    freed = mem.back_to(before)
    pids = None if listed is None else [p["pid"] for p in listed]
    fields = judge_hold(mib / 1024, before, seen, freed, pids, info.get("pid"))
    rec.item(
        name,
        "failed" if fields.get("reason") else "ok",
        holder_allocated_mib=info.get("allocated_mib"),
        **fields,
    )


def judge_hold(
    held_gib: float, before_gib: float, seen_gib: list, freed: dict, pids: list | None, holder_pid: int | None
) -> dict:
    """Did NVML see another process's allocation of `held_gib`, and see it go? Figures and `reason`."""
    added = max(seen_gib) - before_gib
    problems = []
    if added < held_gib * 0.98:
        problems.append(f"NVML saw {added:.2f} GiB more in use, the other process holds {held_gib:.2f}")
    if freed.get("freed") is False:
        problems.append("the memory did not come back after the process exited")
    return {
        "held_gib": round(held_gib, 3),
        "nvml_added_gib": round(added, 3),
        "context_and_cache_gib": round(added - held_gib, 3),
        "holder_pid": holder_pid,
        "nvml_pids": pids,
        "pid_listed": None if pids is None else holder_pid in pids,
        "pid_note": "NVML lists host pids: inside a container they differ from the process's own",
        **freed,
        **({"reason": "; ".join(problems)} if problems else {}),
    }


def sampled_run(ctx, rec) -> None:
    name = "a run sampled"
    if (found := _readable(ctx, rec, name)) is None:
        return
    mem, idle = found
    handle = start_run(speed_config(small_config(steps=LONG), "monitor-sampled"))
    with Sampler(mem, 0.25) as sampler:
        try:
            first_steps(handle, 1)
            t0 = time.time()
            while time.time() - t0 < SAMPLE_S and handle.running():
                time.sleep(0.1)
            t1 = time.time()
        finally:
            handle.stop("sampled long enough")
    fields = judge_sampled(idle, sampler.window(t0, t1))
    rec.item(
        name,
        "failed" if fields.get("reason") else "ok",
        sampled_s=round(t1 - t0, 2),
        samples=[[round(t - t0, 2), round(u, 3), p] for t, u, p in sampler.samples if t0 <= t <= t1],
        run_dir=str(handle.run_dir),
        **fields,
    )


def judge_sampled(idle: dict, window: dict) -> dict:
    """Did NVML see the run: utilization above 0 and more memory in use than when idle?"""
    problems = []
    if not window.get("util_max_pct"):
        problems.append("NVML reported 0 % utilization while the run was stepping")
    if window.get("nvml_peak_gib") is None or window["nvml_peak_gib"] <= idle["mem_used_gib"]:
        problems.append("NVML saw no more memory in use while the run went than before it")
    return {
        "idle_used_gib": round(idle["mem_used_gib"], 3),
        "idle_util_pct": idle["util_pct"],
        **window,
        **({"reason": "; ".join(problems)} if problems else {}),
    }


def run(ctx, rec) -> None:
    ctx.each(rec, (("memory held by another process", hold_check), ("a run sampled", sampled_run)))
    rec.summary = "; ".join(f"{i['name']} {i['status']}" for i in rec.items)
