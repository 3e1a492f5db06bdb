"""The whole GPU check: the plan (the parts in order, each with its share of the time budget), the
environment its runs share, and the one call that runs every part and writes the report.

    python -m tools.gpucheck --out DIR [--budget-s 450] [--parts training,ddp]

The part modules are imported only when the check runs, so `--help` and the no-GPU skip stay fast.
Every run folder (config, events, summary) and the measured ceilings land under DIR, beside the
report, so DIR alone can be brought back from the GPU machine.
"""

from __future__ import annotations

import gc
import importlib
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from workbench.config import ConfigError
from .report import assemble, format_table, versions, write_report
from .runner import FAILED, HUNG, INTERRUPTED, TIMED_OUT, Context, Part, run_parts


@dataclass(frozen=True)
class PartSpec:
    name: str
    module: str  # tools.gpucheck.<module>.run(ctx, rec)
    limit_s: float  # at the default budget (a larger budget scales them alike); inf: what is left
    what: str


# Training goes last and takes what the others left: its runs skip one by one when time runs short,
# the parts before it are bounded, and the ceilings (first) size its runs and give MFU its peak.
PLAN = (
    PartSpec(
        "report", "ceilings", 50, "hardware report, NVML readings, measured ceilings beside the datasheet"
    ),
    PartSpec(
        "ddp", "ddp", 70, "NCCL with one rank, two ranks on the GPU over gloo, a stop and a SIGKILLed rank"
    ),
    PartSpec(
        "fsdp",
        "fsdp",
        30,
        "FSDP2 on 1 rank (2 with 2+ GPUs): each rank's memory predicted "
        "against measured, the allocator's peak beside it",
    ),
    PartSpec(
        "monitor",
        "monitor",
        35,
        "NVML memory and utilization: another process's known allocation, a run sampled",
    ),
    PartSpec(
        "compression",
        "compression",
        35,
        "2:4 sparsity, structured pruning and int8 on the GPU, timed interleaved",
    ),
    PartSpec("loading", "loading", 30, "pinned and pageable copies, non_blocking, a loader sweep"),
    PartSpec(
        "training",
        "training",
        math.inf,
        "CNN and transformer through the launcher: fp32, TF32, bf16, fp16, channels_last, torch.compile",
    ),
)
DEFAULT_BUDGET_S = 450.0  # the whole check inside 8 minutes; training gets at least 200 s of it
MIN_BUDGET_S = 60.0


def select(names: str | None) -> list[PartSpec]:
    """The parts named in a comma-separated list (all of them for None), in the plan's order."""
    if not names:
        return list(PLAN)
    known = [p.name for p in PLAN]
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in known]
    if unknown or not wanted:
        raise ConfigError(f"--parts must name parts from {', '.join(known)} (comma-separated), got {names!r}")
    return [p for p in PLAN if p.name in wanted]


def check_budget(budget_s: float) -> float:
    if not budget_s >= MIN_BUDGET_S:
        raise ConfigError(f"--budget-s must be >= {MIN_BUDGET_S:.0f} seconds, got {budget_s:g}")
    return float(budget_s)


def setup_env(out: Path) -> None:
    """Runs started by the check keep their folders and the measured ceilings under `out`, and import
    this same workbench (a plain checkout on PYTHONPATH works as well as an installed one)."""
    os.environ["WORKBENCH_RUNS"] = str(out / "runs")
    os.environ["WORKBENCH_CACHE"] = str(out / "cache")
    root = str(Path(__file__).resolve().parents[2])
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in path:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *path])


def device_facts(device) -> dict:
    """Name, capability, memory and the datasheet entry of the GPU checked."""
    import torch

    from workbench.machine.gpus import find_gpu

    props = torch.cuda.get_device_properties(device)
    major, minor = torch.cuda.get_device_capability(device)
    spec = find_gpu(props.name)
    return {
        "name": props.name,
        "index": device.index,
        "count": torch.cuda.device_count(),
        "capability": f"{major}.{minor}",
        "sms": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 2),
        "datasheet": spec.as_dict() if spec else None,
    }


def free_device_memory() -> None:
    """Between parts: what an in-process part cached goes back to the device, so NVML baselines and
    the memory of the next runs are honest."""
    import torch

    gc.collect()
    torch.cuda.empty_cache()


def _loader(module: str):
    def run(ctx, rec):
        return importlib.import_module(f"{__package__}.{module}").run(ctx, rec)

    return run


def run_check(out: Path, budget_s: float, specs: list[PartSpec]) -> int:
    """Run the parts, write DIR/gpucheck.json after each, print the table; 0 when no part failed."""
    import torch

    t0 = time.monotonic()
    out = Path(out).resolve()
    setup_env(out)
    device = torch.device("cuda", torch.cuda.current_device())
    ctx = Context(
        out,
        deadline=t0 + budget_s,
        device=device,
        gpu=device_facts(device),
        log=lambda msg: print(msg, flush=True),
        cleanup=free_device_memory,
    )
    meta = {
        "created": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "budget_s": budget_s,
        "versions": versions(),
        "device": ctx.gpu,
    }
    scale = budget_s / DEFAULT_BUDGET_S
    parts = [Part(s.name, s.limit_s * scale, s.what, _loader(s.module)) for s in specs]

    seen: list = []  # the records so far, for a report after Ctrl-C

    def progress(records):
        seen[:] = records
        write_report(out, assemble(meta, records, time.monotonic() - t0, final=False))

    def on_hang(records, rec):  # on the watchdog's thread: the main thread is stuck in a call
        rec.status, rec.error = HUNG, "did not return after its time limit (a call that ignores signals)"
        rep = assemble(meta, records, time.monotonic() - t0)
        print(format_table(rep), flush=True)
        print(f"report: {write_report(out, rep)}; ending the check, the device may be wedged", flush=True)
        os._exit(3)

    ctx.log(
        f"GPU check on {ctx.gpu['name']}: {len(parts)} part(s) in at most {budget_s:.0f} s; "
        f"report under {out}"
    )
    try:
        records = run_parts(parts, ctx, progress, on_hang)
    except KeyboardInterrupt:
        path = write_report(out, assemble(meta, seen, time.monotonic() - t0))
        print(f"interrupted; {path} holds the parts that ran", file=sys.stderr)
        return 130
    rep = assemble(meta, records, time.monotonic() - t0)
    path = write_report(out, rep)
    print(format_table(rep))
    print(f"report: {path}")
    return 1 if any(r.status in (FAILED, TIMED_OUT, HUNG, INTERRUPTED) for r in records) else 0
