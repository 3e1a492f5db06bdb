"""The stacking study: from a baseline config, apply changes one at a time, cumulatively, run every
step for real, and tabulate what each step added, measured properly: every step's config runs once
per round, the rounds alternating their order (workbench.trials.rounds), and each gain is the
median ratio over rounds with its interval and the one verdict rule.

    from workbench.stacking.study import run_study
    df = run_study(RunConfig.smoke(), ["bf16", "channels_last", "workers", "pin_memory", "ddp"], rounds=6)

A baseline with run.time_budget_s gives every run of every step the same seconds: the rates are
compared, and the `steps` column says how many steps each step's runs took (their median).
A change that cannot run on this hardware stays in the table as "skipped" with the reason; a change
that slows the run down is marked "slower" (and still stacked: the list is the user's choice).
Fewer than 6 rounds give no verdict ("within noise", and the note says why).
"""
from __future__ import annotations

import statistics
from typing import Callable

from ..config import RunConfig
from ..events import MEM_PEAK_GIB, RANK, RSS_GIB, SAMPLES_PER_S, STEP_TIME_MS, read_events
from ..machine.contention import busy_sentence
from ..measure.compare import min_rounds, paired_speed_ratio
from ..measure.verdict import MIN_EFFECT
from ..trials.rounds import run_rounds
from .changes import STACK_STEP
from .plan import PlannedStep, plan

COLUMNS = [STACK_STEP, "status", SAMPLES_PER_S, "gain_vs_prev", "gain_low", "gain_high",
           "gain_vs_baseline", "rounds", "steps", "peak_mem_gib", "final_loss", "eval_accuracy",
           STEP_TIME_MS, "threads", "other_cpu_cores", "reason", "note", "run_dir"]


def peak_memory_gib(run_dir) -> float | None:
    """The highest memory reading of rank 0 (GPU allocator peak on a GPU, else process RSS)."""
    peaks = [r.get(MEM_PEAK_GIB, r.get(RSS_GIB)) for r in read_events(run_dir)
             if r.get(RANK) == 0 and (MEM_PEAK_GIB in r or RSS_GIB in r)]
    peaks = [p for p in peaks if isinstance(p, (int, float))]
    return max(peaks) if peaks else None


def step_row(planned: PlannedStep, runs: list[dict] | None, prev: list[dict] | None,
             base: list[dict] | None, min_effect: float = MIN_EFFECT) -> dict:
    """One table row from a step's runs, one per round (None when the step was skipped), against
    the runs of the previous measured step and of the baseline (None for the baseline itself)."""
    row = {c: None for c in COLUMNS}
    row.update({STACK_STEP: planned.change.label}, status="skipped", reason=planned.reason or "",
               note=planned.note)
    if runs is None:
        return row
    done = [s for s in runs if s.get("status") == "completed" and s.get(SAMPLES_PER_S)]
    first = (done or runs)[0]
    row.update(run_dir=first.get("run_dir"), final_loss=first.get("final_loss"),
               eval_accuracy=first.get("eval_accuracy"), threads=first.get("threads"),
               rounds=len(done))
    if len(done) < len(runs) or not done:
        bad = next(s for s in runs if s not in done)
        row.update(status="failed", reason=f"{bad.get('error_type', '')}: "
                                           f"{bad.get('message', bad.get('status'))}")
        return row
    peaks = [p for p in (peak_memory_gib(s["run_dir"]) for s in done if s.get("run_dir"))
             if p is not None]
    row.update({SAMPLES_PER_S: statistics.median(s[SAMPLES_PER_S] for s in done),
                STEP_TIME_MS: statistics.median(s["step_time_ms_median"] for s in done)},
               steps=statistics.median(s["steps"] for s in done),  # differs under a time budget
               peak_mem_gib=max(peaks) if peaks else None)
    readings = [s["contention"] for s in done if s.get("contention")]
    if readings:
        row["other_cpu_cores"] = max(c["other_cpu_cores"] for c in readings)
    if base is None:
        row.update(status="baseline", gain_vs_prev=1.0, gain_vs_baseline=1.0)
        return row
    n = min(len(done), len(prev), len(base))  # rounds in which both sides ran
    gain = paired_speed_ratio([s[SAMPLES_PER_S] for s in prev[:n]],
                              [s[SAMPLES_PER_S] for s in done[:n]], min_effect)
    total = paired_speed_ratio([s[SAMPLES_PER_S] for s in base[:n]],
                               [s[SAMPLES_PER_S] for s in done[:n]], min_effect)
    row.update(status=gain.verdict, gain_vs_prev=gain.ratio, gain_low=gain.low,
               gain_high=gain.high, gain_vs_baseline=total.ratio)
    notes = [row["note"], gain.note,
             busy_sentence(next((c for c in readings if c.get("busy")), None))]
    row["note"] = "; ".join(n for n in notes if n)
    return row


def run_study(baseline: RunConfig, changes, *, rounds: int | None = None,
              on_update: Callable[["pd.DataFrame"], None] | None = None,  # noqa: F821
              timeout_s: float = 900, min_effect: float = MIN_EFFECT,
              stop: Callable[[], bool] | None = None,
              on_run: Callable[[str, int, dict], None] | None = None):
    """Run the baseline and every applicable change, cumulatively, `rounds` times each (default:
    the fewest that carry a 95 % interval); returns a pandas DataFrame.

    `on_update(table)` is called after every run with the table so far (the UI redraws from it),
    `on_run(step, round, summary)` with that run alone (a terminal prints a line);
    `stop()` returning True ends the study before the next run.
    """
    import pandas as pd

    rounds = rounds or min_rounds()
    steps = plan(baseline, changes)
    labels = {i: f"stack{i}-{s.change.key}"[:50] for i, s in enumerate(steps) if s.reason is None}
    configs = {labels[i]: steps[i].config for i in labels}
    results: dict[str, list[dict]] = {label: [] for label in configs}

    def table():
        rows, prev, base = [], None, None
        for i, planned in enumerate(steps):
            runs = results[labels[i]] if i in labels else None
            if runs is not None and not runs:
                continue  # not measured yet
            row = step_row(planned, runs, prev, base, min_effect)
            if row[SAMPLES_PER_S] is not None:
                prev = runs
                base = base if base is not None else runs
            elif i == 0:
                row["reason"] = "the baseline failed, so the study stopped: " + row["reason"]
                rows.append(row)
                break
            rows.append(row)
        return pd.DataFrame(rows, columns=COLUMNS)

    names = {labels[i]: steps[i].change.label for i in labels}

    def heard(label, r, summary):
        results[label].append(summary)
        if on_run is not None:
            on_run(names[label], r, summary)
        if on_update is not None:
            on_update(table())
        if label == labels.get(0) and summary.get("status") != "completed":
            raise _BaselineFailed

    try:
        run_rounds(configs, rounds, timeout_s=timeout_s, speed_only=False, keep_going=True,
                   on_run=heard, stop=stop)
    except _BaselineFailed:
        pass
    return table()


class _BaselineFailed(Exception):
    """Nothing to compare with: the study stops rather than call a later step the baseline."""
