"""Whole runs, a process start each, in rounds whose order alternates (workbench.measure.order): how
comparisons were measured before the trial engine, kept here beside the harnesses that use it (no
lab does). Kept as the reference the engine is held against
(`python -m tools.bench trials`: the two must agree within their intervals on a quiet machine)
and for the GPU check's runs, whose whole run is what it checks; every comparison of the labs goes
through the engine. The threads and wait policy are chosen
anew before each round (workbench.machine.threads) and shared by every run of that round.

    summaries = run_rounds({"fp32": cfg, "bf16": cfg.replace(**{"precision.dtype": "bf16"})}, 6)
"""

from __future__ import annotations

from typing import Callable

from workbench.config import ConfigError, RunConfig
from workbench.distributed.launch import run
from workbench.machine.contention import BUSY_CORES, BUSY_STEAL
from workbench.machine.threads import choose_threads, other_cores_now
from workbench.trials.engine import order_of


def speed_config(cfg: RunConfig, label: str) -> RunConfig:
    """A run that measures speed only: no evaluation, no saved weights."""
    return cfg.replace(**{"run.label": label[:60], "run.eval_batches": 0, "run.save_weights": False})


def run_rounds(
    configs: dict[str, RunConfig],
    rounds: int,
    *,
    timeout_s: float = 900,
    speed_only: bool = True,
    keep_going: bool = False,
    on_run: Callable[[str, int, dict], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> dict[str, list[dict]]:
    """label -> one run summary per round. `speed_only` skips evaluation and saved weights. A run
    that does not complete is an error naming it, or with `keep_going` its summary is kept and
    that config is not run again."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ConfigError(f"rounds must be an integer >= 1, got {rounds!r}")
    labels = list(configs)
    out: dict[str, list[dict]] = {label: [] for label in labels}
    failed: set[str] = set()
    for r in range(rounds):
        other = other_cores_now()  # one look a round: its runs share what it saw, and no thread
        # trial (ThreadChoice.fixed): the sides of a comparison run the same threads
        for label in order_of(labels, r):
            if stop is not None and stop():
                return out
            if label in failed:
                continue
            cfg = configs[label]
            cfg = (
                speed_config(cfg, f"{label}-r{r}")
                if speed_only
                else cfg.replace(**{"run.label": f"{label}-r{r}"[:60]})
            )
            summary = run(cfg, timeout_s=timeout_s, threads=choose_threads(cfg, other).fixed())
            if summary.get("status") != "completed":
                if not keep_going:
                    raise ConfigError(
                        f"{label} (round {r + 1}) ended {summary.get('status')}: "
                        f"{summary.get('message', '')} (see {summary.get('run_dir')})"
                    )
                failed.add(label)
            out[label].append(summary)
            if on_run is not None:
                on_run(label, r, summary)
    return out


def contention_of(summaries: list[dict]) -> dict:
    """What other programs did across runs: the worst and the median reading, and busy or not."""
    readings = [s["contention"] for s in summaries if s.get("contention")]
    if not readings:
        return {"busy": None, "runs": 0}
    other = sorted(c["other_cpu_cores"] for c in readings)
    steal = sorted(c.get("steal_frac", 0.0) for c in readings)
    return {
        "other_cpu_cores_max": other[-1],
        "other_cpu_cores_median": other[len(other) // 2],
        "steal_frac_max": steal[-1],
        "busy_runs": sum(bool(c.get("busy")) for c in readings),
        "runs": len(readings),
        "busy": other[-1] >= BUSY_CORES or steal[-1] >= BUSY_STEAL,
    }
