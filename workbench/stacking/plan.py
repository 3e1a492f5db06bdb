"""Plan a stacking study without running anything: the cumulative config of every step, and the
steps this hardware cannot measure, kept with the reason.

    from workbench.stacking.plan import plan_table
    plan_table(RunConfig.smoke(), ["bf16", "channels_last", "workers", "pin_memory", "ddp"])
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import ConfigError, RunConfig, require_config
from ..machine.capability import resolve_device
from ..machine.fit import cannot_run
from ..machine.threads import threads_for
from .changes import STACK_STEP, Change, as_change


def skip_reason(change: Change, before: RunConfig, after: RunConfig, device) -> str | None:
    """Why this change cannot be measured here (None when it can): what the launch would refuse,
    in its words (workbench.machine.fit), or a change that would do nothing on this device."""
    if after == before:
        return "already part of the config it would be added to"
    if change.settings.get("loader.pin_memory") and device.type != "cuda":
        return "pin_memory needs a GPU: it speeds host-to-GPU copies, and without one torch ignores it"
    return cannot_run(after, device)


@dataclass
class PlannedStep:
    change: Change
    config: RunConfig  # the cumulative config this step runs (the previous one when skipped)
    reason: str | None = None  # why it is skipped
    note: str = ""  # what else changes with this step, so its gain is read right


def side_effects(before: RunConfig, after: RunConfig, device) -> str:
    """Changes a step brings along that its name does not say: on a CPU, what a change of ranks
    does to the threads, so a reader knows what the comparison holds equal."""
    if device.type != "cpu" or before.distributed.nproc == after.distributed.nproc:
        return ""
    t0, t1 = threads_for(before), threads_for(after)
    n0, n1 = before.distributed.nproc, after.distributed.nproc
    same = "the same" if n0 * t0 == n1 * t1 else "a different number of"
    return (f"{n0} process(es) x {t0} thread(s) against {n1} ranks x {t1} thread(s): {same} "
            f"{'cores' if same == 'the same' else 'threads'} in total ({n0 * t0} vs {n1 * t1})")


def plan(baseline: RunConfig, changes) -> list[PlannedStep]:
    """The cumulative configs, without running anything. Skipped changes are not stacked."""
    require_config(baseline)
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

    return pd.DataFrame([{STACK_STEP: s.change.label, "will_run": s.reason is None,
                          "sets": ", ".join(f"{k}={v}" for k, v in s.change.settings.items()),
                          "skip_reason": s.reason or "", "note": s.note}
                         for s in plan(baseline, changes)])


def final_config(baseline: RunConfig, changes) -> RunConfig:
    """The config with every applicable change stacked: what to export."""
    return plan(baseline, changes)[-1].config if changes else baseline
