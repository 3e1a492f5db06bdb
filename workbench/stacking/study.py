"""The stacking study: from a baseline config, try changes one at a time, in the order listed, and
keep a change only when it is measured faster than the best config so far; the next change is
measured on top of what was kept. Each comparison is a trial (workbench.trials.engine): the best
config and the candidate built once in warm host processes, their steps alternating in slices,
round after round in alternating order, the gain the median ratio over the pairs with its interval,
the pairs dropped, the conditions and the one verdict rule.

    from workbench.stacking.study import run_study
    df = run_study(RunConfig.smoke(), ["bf16", "channels_last", "workers", "pin_memory", "ddp"], rounds=8)
    df.attrs["kept"]      # the settings kept, on top of the baseline: what helped, and only that

A change that cannot run here stays in the table as "skipped" with the reason; one measured slower,
within noise or without a verdict is dropped and said so. The total is the product of the kept
steps' ratios, and beside it a last trial of the stacked config against the baseline, side by side,
whose interval says whether the steps add up as measured (they can interact). Fewer than 6 pairs
give no verdict, so nothing is kept from them.
"""

from __future__ import annotations

import math
import statistics
from typing import Callable

from ..config import RunConfig
from ..events import RANK, SAMPLES_PER_S, STEP_TIME_MS
from ..machine.capability import resolve_device
from ..measure import claims
from ..measure.ratios import min_rounds
from ..measure.verdict import FASTER, MIN_EFFECT
from ..train.sharding import ACTIVATIONS, HELD
from ..trials.engine import SLICE_S, Slice, Trial
from ..trials.hosts import TrainingHosts, TrialError
from ..trials.changes import STACK_STEP
from .plan import ON_TOP, PlannedStep, plan, side_effects

TOTAL = "all kept, against the baseline"  # the last row: the stacked config measured side by side
COLUMNS = [
    STACK_STEP,
    "status",
    "kept",
    SAMPLES_PER_S,
    "gain_vs_prev",
    "gain_low",
    "gain_high",
    "gain_vs_baseline",
    "rounds",
    "dropped",
    "steps",
    "mem_held_mib",
    "final_loss",
    STEP_TIME_MS,
    "threads",
    "other_cpu_cores",
    "reason",
    "note",
    "run_dir",
]


def held_mib(memory: dict | None) -> float | None:
    """What rank 0 held for the step: parameters, gradients, optimizer state and activations."""
    if not memory:
        return None
    got = next((m for m in memory["measured"] if m.get(RANK) == 0), memory["measured"][0])
    return round(sum(got.get(k, 0) for k in (*HELD, ACTIVATIONS)) / 2**20, 2)  # GiB read 0.0006 here


def step_row(
    planned: PlannedStep,
    trial: Trial | None,
    label: str | None,
    prev: str | None,
    level: float = 1.0,
    *,
    memory: dict | None = None,
    run_dir: str | None = None,
    failed: str | None = None,
) -> dict:
    """One table row: a skipped step (no trial), a failed one, the baseline (`prev` None), or a
    measured one against the best config so far (`prev`), whose gain over the baseline so far is
    `level`. `kept` says whether the study keeps it: the baseline, and a step measured faster."""
    row = {c: None for c in COLUMNS}
    row.update(
        {STACK_STEP: planned.change.label},
        status="skipped",
        kept=False,
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
        mem_held_mib=held_mib(memory),
        final_loss=losses[-1] if losses else None,
        other_cpu_cores=max(s.other_cores or 0.0 for s in done),
    )
    if prev is None:
        row.update(status="baseline", kept=True, gain_vs_prev=1.0, gain_vs_baseline=1.0)
        return row
    gain = trial.compare(label, prev)
    r = gain.ratio
    kept = r.verdict == FASTER
    row.update(  # no verdict before its first pair (a dropped one, mid-study): "not measured", never a
        status=r.verdict or "not measured",  # None that pandas would turn into NaN
        kept=kept,
        gain_vs_prev=r.ratio,
        gain_low=r.low,
        gain_high=r.high,
        gain_vs_baseline=None if r.ratio is None else level * r.ratio,
        rounds=gain.pairs,
        dropped=gain.dropped,
    )
    why = "" if kept else "not kept: only a step measured faster is kept; the next is measured without it"
    busy = gain.conditions if gain.busy_pairs else ""
    row["note"] = "; ".join(n for n in (row["note"], r.note, busy, why) if n)
    return row


def total_row(trial: Trial, base: str, best: str, product: float, run_dir: str | None) -> dict:
    """The stacked config against the baseline, measured side by side: the check on the product
    (`total_claim` recomputes what its sentence says)."""
    c = trial.compare(best, base)
    r = c.ratio
    row = {col: None for col in COLUMNS}
    inside = r.low is not None and r.low <= product <= r.high
    said = (
        f"the kept steps' product, {product:.2f}x, lies inside this interval"
        if inside
        else f"the kept steps' product, {product:.2f}x, lies outside this interval: the steps "
        "interact, or the machine changed between their trials"
        if r.low is not None
        else f"the kept steps' product is {product:.2f}x; {r.note}"
    )
    row.update(
        {STACK_STEP: TOTAL, SAMPLES_PER_S: round(statistics.median(s.rate for s in trial.slices[best]), 2)},
        status=r.verdict or "not measured",
        kept=None,
        gain_vs_prev=r.ratio,
        gain_low=r.low,
        gain_high=r.high,
        gain_vs_baseline=product,
        rounds=c.pairs,
        dropped=c.dropped,
        note=said,
        reason="",
        run_dir=run_dir,
    )
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
    """Try each change in order on top of the best config so far, `rounds` rounds of slices a step
    (default: the fewest that carry a 95 % interval), keeping what is measured faster; then the
    stacked config against the baseline. Returns a pandas DataFrame whose attrs hold the kept
    settings (`kept`), their product (`product`) and the best step's run folder (`best_run_dir`).

    `on_update(table)` is called after every round with the table so far (the UI redraws from it),
    `on_slice(slice)` after every slice (a terminal prints a line); `stop()` returning True ends
    the study before the next round.
    """
    import pandas as pd

    rounds = rounds or min_rounds()
    steps = plan(baseline, changes)
    device = resolve_device(baseline.run.device)
    rows: list[dict] = []
    kept: dict = {}
    product = 1.0

    def table():
        return pd.DataFrame(rows, columns=COLUMNS)

    def measured(trial, label, prev, planned, hosts) -> dict:
        memory = hosts.variants[label].memory(label)
        run_dir = hosts.built.get(label, {}).get("run_dir")
        return step_row(planned, trial, label, prev, product, memory=memory, run_dir=run_dir)

    with TrainingHosts(baseline, timeout_s=timeout_s) as hosts:

        def heard(s: Slice) -> None:
            hosts.record(s)
            if on_slice is not None:
                on_slice(s)

        def trial_of(a: str, b: str) -> Trial:  # a dropped pair is measured again, as everywhere
            trial = Trial(hosts.of([a, b]), a, slice_s=slice_s, min_effect=min_effect, on_slice=heard)
            return trial.run(rounds, stop, on_round=None if on_update is None else lambda: on_update(table()))

        base = best = "stack0-baseline"
        best_cfg = baseline
        try:
            hosts.add(base, baseline)
        except TrialError as e:
            row = step_row(steps[0], None, None, None, failed=str(e))
            row["reason"] = "the baseline failed, so the study stopped: " + row["reason"]
            rows.append(row)
            return _ended(table(), steps, kept, product, None, on_update)
        first = True
        for i, planned in enumerate(steps[1:], 1):
            if planned.reason is not None:
                rows.append(step_row(planned, None, None, best))
                continue
            if stop is not None and stop():
                row = step_row(planned, None, None, best)
                rows.append({**row, "status": "not measured", "reason": "the study was stopped before it"})
                continue
            cfg, reason = planned.change.applied(best_cfg, device)
            if reason:  # what the launch would refuse on top of what was kept
                rows.append(step_row(PlannedStep(planned.change, cfg, ON_TOP + reason), None, None, best))
                continue
            # what else changes, against the config it is measured on (what was kept), not the plan's
            planned = PlannedStep(planned.change, cfg, None, side_effects(best_cfg, cfg, device))
            label = f"stack{i}-{planned.change.key}"[:50]
            try:
                hosts.add(label, cfg)
            except TrialError as e:
                rows.append(step_row(planned, None, None, best, failed=str(e)))
                continue
            trial = trial_of(best, label)
            if first:  # the baseline's row, from its first trial
                rows.insert(0, measured(trial, best, None, steps[0], hosts))
                first = False
            row = measured(trial, label, best, planned, hosts)
            rows.append(row)
            if row["kept"]:
                product *= row["gain_vs_prev"]
                kept.update(planned.change.settings)
                if best != base:
                    hosts.drop(best)
                best, best_cfg = label, cfg
            else:
                hosts.drop(label)
            if on_update is not None:
                on_update(table())
        if first:  # nothing was measured against it: the baseline alone
            rows.insert(0, step_row(steps[0], None, None, None))
            rows[0].update(status="baseline", kept=True, gain_vs_prev=1.0, gain_vs_baseline=1.0)
        best_dir = hosts.built.get(best, {}).get("run_dir")
        if best != base and not (stop is not None and stop()):
            rows.append(total_row(trial_of(base, best), base, best, product, best_dir))
        hosts.variants[best].save(best)  # the inference end starts from the best config's weights
    return _ended(table(), steps, kept, product, best_dir, on_update)


def total_claim(rows: list[dict]) -> None:
    """The total row's claim, recomputed from the table: its product is the kept steps' gains
    multiplied, and its sentence says inside or outside as its printed interval has it."""
    total = next((r for r in rows if r[STACK_STEP] == TOTAL), None)
    if total is None:
        return
    gains = [r["gain_vs_prev"] for r in rows if r.get("kept") is True and r["status"] != "baseline"]
    product = math.prod(gains)
    low, high, said = total["gain_low"], total["gain_high"], total["note"]
    holds = math.isclose(total["gain_vs_baseline"], product, rel_tol=1e-9) and f"{product:.2f}x" in said
    if low is not None and high is not None:
        holds = holds and ("lies inside" in said) == (low <= product <= high)
    claims.record(
        "the stacking total",
        "product",
        said,
        holds,
        f"the kept steps' gains {', '.join(f'{g:.4f}' for g in gains)} multiply to {product:.4f}; "
        f"measured against the baseline [{low}, {high}]",
    )


def _ended(out, steps, kept: dict, product: float, best_dir, on_update):
    out.attrs.update(kept=dict(kept), product=product, best_run_dir=best_dir)
    # a step planned to run ran, or (planned "if the kept steps leave room") met kept steps that did not
    ran = {
        r[STACK_STEP]: r["status"] not in ("skipped", "failed") or str(r["reason"]).startswith(ON_TOP)
        for r in out.to_dict("records")
    }
    claims.plan(
        "the stacking plan",
        {s.change.label: s.reason is None for s in steps},
        {s.change.label: ran.get(s.change.label, False) for s in steps},
    )
    claims.record(
        "the stacking study",
        "kept",
        f"kept {', '.join(f'{k}={v}' for k, v in kept.items()) or 'nothing: the baseline'}",
        all(r["status"] == FASTER for r in out.to_dict("records") if r["kept"] and r["status"] != "baseline"),
        "every kept step measured faster than the best config before it",
    )
    total_claim(out.to_dict("records"))
    if not math.isfinite(product):
        raise ValueError(f"the kept steps' product is not a number: {product}")
    if on_update is not None:
        on_update(out)
    return out
