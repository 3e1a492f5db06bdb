"""The stacking study: from a baseline config, apply changes one at a time, cumulatively, run every
step for real (workbench.launch.run), and tabulate what each step added.

    from workbench.stacking import run_study
    df = run_study(RunConfig.smoke(), ["bf16", "channels_last", "workers", "pin_memory", "ddp"])

A change that cannot run on this hardware stays in the table as "skipped" with the reason; a change
that slows the run down is marked "slower" (and still stacked: the list is the user's choice).
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import Callable

from ..config import ConfigError, RunConfig
from ..precision import resolve_device, unsupported_reason

NOISE = 0.03  # gains within +-3 % are reported as "within noise", not faster or slower


@dataclass(frozen=True)
class Change:
    """One step of the study: a name, the dotted settings it sets, and what it is for."""

    key: str
    label: str
    settings: dict = field(default_factory=dict)
    why: str = ""


CHANGES = {c.key: c for c in [
    Change("bf16", "+ bf16", {"precision.dtype": "bf16"},
           "bf16 autocast: matrix work in bfloat16 (AMX on recent x86 CPUs, tensor cores on GPUs)"),
    Change("fp16", "+ fp16", {"precision.dtype": "fp16"}, "fp16 autocast with a gradient scaler"),
    Change("tf32", "+ TF32", {"precision.tf32": True}, "TF32 matmuls on Ampere or newer GPUs"),
    Change("channels_last", "+ channels_last", {"precision.channels_last": True},
           "NHWC memory layout for convolutions"),
    Change("compile", "+ compile", {"compile.enabled": True}, "torch.compile (inductor)"),
    Change("workers", "+ 2 loader workers", {"loader.num_workers": 2, "loader.persistent_workers": True},
           "batches prepared in 2 worker processes, kept between epochs"),
    Change("pin_memory", "+ pinned memory", {"loader.pin_memory": True},
           "page-locked host batches for faster, asynchronous copies to the GPU"),
    Change("ddp", "+ 2 DDP ranks", {"distributed.nproc": 2}, "two ranks with torchrun, gradients all-reduced"),
]}


def as_change(item) -> Change:
    """A Change, a key of CHANGES, or (label, {dotted: value}) for your own step."""
    if isinstance(item, Change):
        return item
    if isinstance(item, str):
        if item not in CHANGES:
            raise ConfigError(f"stacking change {item!r} is unknown; use one of {', '.join(CHANGES)} "
                              "or a (label, {'dotted.field': value}) pair")
        return CHANGES[item]
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], dict):
        return Change(str(item[0]), str(item[0]), dict(item[1]))
    raise ConfigError(f"stacking change must be a name or a (label, settings) pair, got {item!r}")


def skip_reason(change: Change, before: RunConfig, after: RunConfig, device) -> str | None:
    """Why this change cannot be measured here (None when it can)."""
    if after == before:
        return "already part of the config it would be added to"
    s = change.settings
    dtype = s.get("precision.dtype")
    for option, asked in ((dtype, dtype in ("bf16", "fp16")), ("tf32", s.get("precision.tf32")),
                          ("channels_last", s.get("precision.channels_last"))):
        if asked:
            reason = unsupported_reason(after, device, option)
            if reason:
                return reason
    if s.get("loader.pin_memory") and device.type != "cuda":
        return "pin_memory needs a GPU: it speeds host-to-GPU copies, and without one torch ignores it"
    if s.get("compile.enabled") and device.type == "cpu" and not (shutil.which("c++") or shutil.which("g++")):
        return "torch.compile on the CPU needs a C++ compiler (c++ or g++), none found on PATH"
    ranks = after.distributed.nproc
    if ranks > before.distributed.nproc:
        if device.type == "cuda":
            import torch

            if ranks > torch.cuda.device_count():
                return f"{ranks} ranks need {ranks} GPUs, this machine has {torch.cuda.device_count()}"
        elif ranks > (os.cpu_count() or 1):
            return f"{ranks} CPU ranks need {ranks} cores, this machine has {os.cpu_count()}"
    workers = after.loader.num_workers
    if workers > (os.cpu_count() or 1):
        return f"{workers} loader workers need {workers} cores, this machine has {os.cpu_count()}"
    return None


@dataclass
class PlannedStep:
    change: Change
    config: RunConfig  # the cumulative config this step runs (the previous one when skipped)
    reason: str | None = None  # why it is skipped
    note: str = ""  # what else changes with this step, so its gain is read right


THREADS_NOTE = ("torchrun runs each rank with 1 CPU thread (OMP_NUM_THREADS=1) where one process used "
                "every core: part of this change is the thread count, which matters most on a busy CPU")


def side_effects(before: RunConfig, after: RunConfig, device) -> str:
    """Changes a step brings along that its name does not say."""
    if (device.type == "cpu" and before.distributed.world_size == 1 < after.distributed.world_size
            and "OMP_NUM_THREADS" not in os.environ):
        return THREADS_NOTE
    return ""


def plan(baseline: RunConfig, changes) -> list[PlannedStep]:
    """The cumulative configs, without running anything. Skipped changes are not stacked."""
    baseline.validate()
    device = resolve_device(baseline.run.device)
    steps, cfg = [PlannedStep(Change("baseline", "baseline"), baseline)], baseline
    for item in changes:
        change = as_change(item)
        try:
            after = cfg.replace(**change.settings)
        except ConfigError as e:
            steps.append(PlannedStep(change, cfg, f"not a valid config: {e}"))
            continue
        reason = skip_reason(change, cfg, after, device)
        note = "" if reason else side_effects(cfg, after, device)
        steps.append(PlannedStep(change, cfg if reason else after, reason, note))
        if not reason:
            cfg = after
    return steps


def plan_table(baseline: RunConfig, changes):
    """The plan as a DataFrame: each step, what it sets, whether it will run, and why not."""
    import pandas as pd

    return pd.DataFrame([{"step": s.change.label, "will_run": s.reason is None,
                          "sets": ", ".join(f"{k}={v}" for k, v in s.change.settings.items()),
                          "skip_reason": s.reason or "", "note": s.note}
                         for s in plan(baseline, changes)])


COLUMNS = ["step", "status", "samples_per_s", "gain_vs_prev", "gain_vs_baseline", "peak_mem_gib",
           "final_loss", "eval_accuracy", "step_time_ms", "reason", "note", "run_dir"]


def verdict(gain: float, noise: float = NOISE) -> str:
    return "faster" if gain > 1 + noise else "slower" if gain < 1 - noise else "within noise"


def peak_memory_gib(run_dir) -> float | None:
    """The highest memory reading of rank 0 (GPU allocator peak on a GPU, else process RSS)."""
    from ..events import read_events

    peaks = [r.get("mem_peak_gib", r.get("rss_gib")) for r in read_events(run_dir)
             if r.get("rank") == 0 and ("mem_peak_gib" in r or "rss_gib" in r)]
    peaks = [p for p in peaks if isinstance(p, (int, float))]
    return max(peaks) if peaks else None


def step_row(planned: PlannedStep, summary: dict | None, prev: float | None, base: float | None,
             noise: float = NOISE) -> dict:
    """One table row from a run's summary (None when the step was skipped)."""
    row = {"step": planned.change.label, "status": "skipped", "samples_per_s": None,
           "gain_vs_prev": None, "gain_vs_baseline": None, "peak_mem_gib": None, "final_loss": None,
           "eval_accuracy": None, "step_time_ms": None, "reason": planned.reason or "",
           "note": planned.note, "run_dir": None}
    if summary is None:
        return row
    row.update(run_dir=summary.get("run_dir"), final_loss=summary.get("final_loss"),
               eval_accuracy=summary.get("eval_accuracy"), step_time_ms=summary.get("step_time_ms_median"),
               samples_per_s=summary.get("samples_per_s"))
    if summary.get("run_dir"):
        row["peak_mem_gib"] = peak_memory_gib(summary["run_dir"])
    if summary.get("status") != "completed" or not row["samples_per_s"]:
        row.update(status="failed", samples_per_s=None,
                   reason=f"{summary.get('error_type', '')}: {summary.get('message', summary.get('status'))}")
        return row
    sps = row["samples_per_s"]
    if base is None:
        row.update(status="baseline", gain_vs_prev=1.0, gain_vs_baseline=1.0)
    else:
        row.update(gain_vs_prev=round(sps / prev, 3), gain_vs_baseline=round(sps / base, 3))
        row["status"] = verdict(row["gain_vs_prev"], noise)
    return row


def run_study(baseline: RunConfig, changes, *, on_step: Callable[[dict], None] | None = None,
              timeout_s: float = 900, noise: float = NOISE, stop: Callable[[], bool] | None = None):
    """Run the baseline and every applicable change, cumulatively; returns a pandas DataFrame.

    `on_step(row)` is called as each step finishes (the UI redraws from it); `stop()` returning True
    ends the study before the next run.
    """
    import pandas as pd

    from ..launch import run

    rows, prev, base = [], None, None
    for i, planned in enumerate(plan(baseline, changes)):
        if stop is not None and stop():
            break
        summary = None
        if planned.reason is None:
            label = f"stack{i}-{planned.change.key}"[:60]
            summary = run(planned.config.replace(**{"run.label": label}), timeout_s=timeout_s)
        row = step_row(planned, summary, prev, base, noise)
        if row["samples_per_s"] is not None:
            prev = row["samples_per_s"]
            base = base if base is not None else prev
        rows.append(row)
        if on_step is not None:
            on_step(row)
        if base is None:  # nothing to compare with: stop rather than call a later step the baseline
            row["reason"] = "the baseline failed, so the study stopped: " + row["reason"]
            break
    return pd.DataFrame(rows, columns=COLUMNS)


def final_config(baseline: RunConfig, changes) -> RunConfig:
    """The config with every applicable change stacked: what to export."""
    return plan(baseline, changes)[-1].config if changes else baseline


def _num(value) -> float | None:
    """A figure from a table cell; None for a missing one (pandas turns None into NaN)."""
    return None if value is None or value != value else float(value)


def waterfall_records(df) -> dict:
    """What a waterfall chart of samples/s needs: labels, measures, deltas and hover text.

    The baseline is an absolute bar, each step a relative one (0 for a skipped or failed step, with
    the reason as its text), and the last bar the total reached."""
    x, measure, y, text = [], [], [], []
    prev = None
    for row in df.to_dict("records"):
        sps = _num(row["samples_per_s"])
        x.append(row["step"])
        if row["status"] == "baseline":
            measure.append("absolute")
            y.append(sps)
            text.append(f"{sps:,.0f}/s")
        elif sps is None:
            measure.append("relative")
            y.append(0.0)
            text.append(f"{row['status']}: {row['reason']}"[:80])
        else:
            measure.append("relative")
            y.append(sps - prev)
            text.append(f"x{row['gain_vs_prev']:.2f} ({row['status']})")
        if sps is not None:
            prev = sps
    done = [r for r in df.to_dict("records") if _num(r["samples_per_s"]) is not None]
    if done and done[0]["status"] == "baseline":
        x.append("total")
        measure.append("total")
        y.append(done[-1]["samples_per_s"])
        text.append(f"x{done[-1]['gain_vs_baseline']:.2f} vs baseline")
    return {"x": x, "measure": measure, "y": y, "text": text}
