"""The stacking study: from a baseline config, apply changes one at a time, cumulatively, and
tabulate what each step added, through the trial engine (workbench.trials.engine): every step's
config is built once in a warm host process (a step with ranks or loader workers in one of its own),
their steps alternate in slices, round after round in alternating order, and each gain is the median
ratio over the pairs with its interval, the pairs dropped, the conditions and the one verdict rule.

    from workbench.stacking.study import run_study
    df = run_study(RunConfig.smoke(), ["bf16", "channels_last", "workers", "pin_memory", "ddp"], rounds=8)

A change that cannot run on this hardware stays in the table as "skipped" with the reason; a change
that slows the run down is marked "slower" (and still stacked: the list is the user's choice).
Fewer than 6 pairs give no verdict ("within noise", and the note says why).
"""

from __future__ import annotations

import statistics
from typing import Callable

from ..config import RunConfig
from ..events import RANK, SAMPLES_PER_S, STEP_TIME_MS
from ..measure import claims
from ..measure.ratios import min_rounds
from ..measure.verdict import MIN_EFFECT
from ..train.sharding import ACTIVATIONS, HELD
from ..trials.engine import SLICE_S, Slice, Trial
from ..trials.hosts import TrainingHosts, TrialError
from ..trials.changes import STACK_STEP
from .plan import PlannedStep, plan

COLUMNS = [
    STACK_STEP,
    "status",
    SAMPLES_PER_S,
    "gain_vs_prev",
    "gain_low",
    "gain_high",
    "gain_vs_baseline",
    "rounds",
    "dropped",
    "steps",
    "mem_held_gib",
    "final_loss",
    STEP_TIME_MS,
    "threads",
    "other_cpu_cores",
    "reason",
    "note",
    "run_dir",
]


def held_gib(memory: dict | None) -> float | None:
    """What rank 0 held for the step: parameters, gradients, optimizer state and activations."""
    if not memory:
        return None
    got = next((m for m in memory["measured"] if m.get(RANK) == 0), memory["measured"][0])
    return round(sum(got.get(k, 0) for k in (*HELD, ACTIVATIONS)) / 2**30, 4)


def step_row(
    planned: PlannedStep,
    trial: Trial | None,
    label: str | None,
    prev: str | None,
    base: str | None,
    *,
    memory: dict | None = None,
    run_dir: str | None = None,
    failed: str | None = None,
) -> dict:
    """One table row: a skipped step (no trial), a failed one, or a measured one against the
    previous measured step and the baseline (None for the baseline itself)."""
    row = {c: None for c in COLUMNS}
    row.update(
        {STACK_STEP: planned.change.label},
        status="skipped",
        reason=planned.reason or "",
        note=planned.note,
        run_dir=run_dir,
    )
    if failed:
        row.update(status="failed", reason=failed)
        return row
    if trial is None or label is None or not trial.slices[label]:
        return row
    done = trial.slices[label]
    losses = trial.losses(label)
    row.update(
        {
            SAMPLES_PER_S: round(statistics.median(s.rate for s in done), 2),
            STEP_TIME_MS: round(statistics.median(s.wall_s / s.steps for s in done) * 1e3, 4),
        },
        steps=statistics.median(s.steps for s in done),
        rounds=len(done),
        threads=done[0].threads,
        mem_held_gib=held_gib(memory),
        final_loss=losses[-1] if losses else None,
        other_cpu_cores=max(s.other_cores or 0.0 for s in done),
    )
    if base is None:
        row.update(status="baseline", gain_vs_prev=1.0, gain_vs_baseline=1.0)
        return row
    gain, total = trial.compare(label, prev), trial.compare(label, base)
    r = gain.ratio
    row.update(  # no verdict before its first pair (a dropped one, mid-study): "not measured", never a
        status=r.verdict or "not measured",  # None that pandas would turn into NaN
        gain_vs_prev=r.ratio,
        gain_low=r.low,
        gain_high=r.high,
        gain_vs_baseline=total.ratio.ratio,
        rounds=gain.pairs,
        dropped=gain.dropped,
    )
    busy = gain.conditions if gain.busy_pairs else ""
    row["note"] = "; ".join(n for n in (row["note"], r.note, busy) if n)
    return row


def run_study(
    baseline: RunConfig,
    changes,
    *,
    rounds: int | None = None,
    on_update: Callable[["pd.DataFrame"], None] | None = None,  # noqa: F821
    timeout_s: float = 900,
    min_effect: float = MIN_EFFECT,
    stop: Callable[[], bool] | None = None,
    slice_s: float = SLICE_S,
    on_slice: Callable[[Slice], None] | None = None,
):
    """Build the baseline and every applicable change, cumulatively, and run `rounds` rounds of
    slices (default: the fewest that carry a 95 % interval); returns a pandas DataFrame.

    `on_update(table)` is called after every round with the table so far (the UI redraws from it),
    `on_slice(slice)` after every slice (a terminal prints a line); `stop()` returning True ends
    the study before the next round.
    """
    import pandas as pd

    rounds = rounds or min_rounds()
    steps = plan(baseline, changes)
    labels = {i: f"stack{i}-{s.change.key}"[:50] for i, s in enumerate(steps) if s.reason is None}
    failed: dict[int, str] = {}
    with TrainingHosts(baseline, timeout_s=timeout_s) as hosts:
        for i, label in labels.items():
            try:
                hosts.add(label, steps[i].config)
            except TrialError as e:
                failed[i] = str(e)
        built = {i: label for i, label in labels.items() if i not in failed}
        trial = None

        def heard(s: Slice) -> None:
            hosts.record(s)
            if on_slice is not None:
                on_slice(s)

        memory: dict[str, dict] = {}

        def table():
            rows, prev, base = [], None, None
            for i, planned in enumerate(steps):
                label = built.get(i)
                row = step_row(
                    planned,
                    trial,
                    label,
                    prev,
                    base,
                    memory=memory.get(label),
                    run_dir=hosts.built.get(label, {}).get("run_dir"),
                    failed=failed.get(i),
                )
                if row[SAMPLES_PER_S] is not None:
                    prev, base = label, base or label
                elif i == 0 and row["status"] == "failed":
                    row["reason"] = "the baseline failed, so the study stopped: " + row["reason"]
                    rows.append(row)
                    break
                rows.append(row)
            return pd.DataFrame(rows, columns=COLUMNS)

        if 0 in built:
            trial = Trial(
                hosts.of(built.values()), built[0], slice_s=slice_s, min_effect=min_effect, on_slice=heard
            )
            for _ in range(rounds):
                if stop is not None and stop():
                    break
                trial.round()
                if on_update is not None:
                    on_update(table())
            for label in built.values():
                memory[label] = hosts.variants[label].memory(label)
            last = list(built.values())[-1]
            hosts.variants[last].save(last)  # the inference end starts from its weights
        out = table()
    claims.plan(
        "the stacking plan",
        {s.change.label: s.reason is None for s in steps},
        {r[STACK_STEP]: r["status"] not in ("skipped", "failed") for r in out.to_dict("records")},
    )
    if on_update is not None:
        on_update(out)
    return out


class _BaselineFailed(Exception):
    """Nothing to compare with: the study stops rather than call a later step the baseline."""
