"""Plan a stacking study without running anything: the cumulative config of every step, and the
steps this hardware cannot measure, kept with the reason.

    from workbench.stacking.plan import plan_table
    plan_table(RunConfig.smoke(), ["bf16", "channels_last", "workers", "pin_memory", "ddp"])
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import RunConfig, require_config
from ..machine.capability import resolve_device
from ..machine.threads import threads_for
from ..trials.changes import STACK_STEP, Change, as_change


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
    return (
        f"{n0} process(es) x {t0} thread(s) against {n1} ranks x {t1} thread(s): {same} "
        f"{'cores' if same == 'the same' else 'threads'} in total ({n0 * t0} vs {n1 * t1})"
    )


ON_TOP = "on top of what was kept: "  # a step that fits alone but not with the steps kept before it
IF_ROOM = "runs if the steps kept before it leave room for it; on top of all of them: "


def plan(baseline: RunConfig, changes) -> list[PlannedStep]:
    """The cumulative configs, without running anything. A change this machine cannot run even on
    the baseline is skipped, with the reason; one that fits the baseline but not on top of every
    change before it will run if the ones kept leave room (the study keeps only faster steps, so
    which ones are kept is known only as it goes), and says so. Skipped changes are not stacked."""
    require_config(baseline)
    device = resolve_device(baseline.run.device)
    steps, cfg = [PlannedStep(Change("baseline", label="baseline"), baseline)], baseline
    earlier: set[str] = set()  # the fields the changes before set (one set twice is refused)
    for item in changes:
        change = as_change(item)
        after, reason = change.applied(cfg, device)
        if reason and not set(change.settings) & earlier and change.applied(baseline, device)[1] is None:
            steps.append(PlannedStep(change, cfg, None, IF_ROOM + reason))
            earlier.update(change.settings)
            continue  # not stacked: the next steps are planned on what fits
        steps.append(PlannedStep(change, after, reason, "" if reason else side_effects(cfg, after, device)))
        earlier.update(change.settings)
        cfg = after
    return steps


def plan_table(baseline: RunConfig, changes):
    """The plan as a DataFrame: each step, what it sets, whether it will run, and why not."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                STACK_STEP: s.change.label,
                "will_run": s.reason is None,
                "sets": ", ".join(f"{k}={v}" for k, v in s.change.settings.items()),
                "skip_reason": s.reason or "",
                "note": s.note,
            }
            for s in plan(baseline, changes)
        ]
    )


def final_config(baseline: RunConfig, changes) -> RunConfig:
    """The config with every applicable change stacked: what to export."""
    return plan(baseline, changes)[-1].config if changes else baseline
