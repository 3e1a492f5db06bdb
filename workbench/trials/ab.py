"""The A/B test of two training configs: short real runs in alternating rounds (A B, B A, ...),
the median speed ratio of B over A with its interval, the verdict, and what other programs did.

    result = ab_test(cfg, cfg.replace(**{"precision.dtype": "bf16"}), rounds=6, budget_s=5)
    print(result.text())    # 'B vs A: 1.31x [1.18, 1.44] over 6 rounds: faster ...'

Each run is sized by `steps`, or by a time budget (`budget_s`: every run of both sides gets the same
seconds, so a variant 12x slower costs the same minutes, not 12x); the rates are compared either
way, and the result says how many steps each side ran.

An A/A test (the same config on both sides) comes out within noise: that is how to know the
method is honest on this machine, busy or not.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..config import RunConfig
from ..disk import mib
from ..events import RANK, SAMPLES_PER_S
from ..measure.compare import Ratio, min_rounds, paired_speed_ratio
from ..measure.verdict import MIN_EFFECT
from ..train.sharding import ACTIVATIONS, HELD, PEAK
from .rounds import contention_of, run_rounds

BUDGET_MAX_STEPS = 1_000_000  # a budgeted run's bound on steps: its budget ends it first


@dataclass
class ABResult:
    labels: tuple[str, str]
    ratio: Ratio  # speed of B over A
    samples_per_s: dict = field(default_factory=dict)  # label -> one figure per round
    threads: dict = field(default_factory=dict)  # label -> intra-op threads per process
    steps: dict = field(default_factory=dict)  # label -> steps of each round's run
    contention: dict = field(default_factory=dict)
    run_dirs: dict = field(default_factory=dict)
    # label -> {"predicted": [...], "measured": [...]}: each rank's bytes in the last run, by part
    memory_per_rank: dict = field(default_factory=dict)

    @property
    def busy(self) -> bool:
        return bool(self.contention.get("busy"))

    def text(self) -> str:
        a, b = self.labels
        lines = [f"{b} vs {a}: {self.ratio.label()}"]
        for label in self.labels:
            rates = ", ".join(f"{v:,.0f}" for v in self.samples_per_s[label])
            steps = self.steps.get(label) or []
            ran = f", {min(steps)}-{max(steps)} steps a run" if steps else ""
            lines.append(f"  {label}: samples/s per round {rates} ({self.threads[label]} thread(s) "
                         f"per process{ran})")
        for label in self.labels:
            memory = self.memory_per_rank.get(label)
            if memory:
                lines.append(f"  {label}: per rank, measured (predicted): {rank_memory(memory)}")
        c = self.contention
        if c.get("runs"):
            lines.append(f"  other programs: up to {c['other_cpu_cores_max']:.2f} cores "
                         f"(median {c['other_cpu_cores_median']:.2f}), steal up to "
                         f"{c['steal_frac_max']:.0%}, {c['busy_runs']} of {c['runs']} runs busy")
        if self.busy:
            lines.append("  the machine was busy during this comparison: the comparison is "
                         "unreliable; rerun it when other work has stopped")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {"a": self.labels[0], "b": self.labels[1], **self.ratio.as_dict("speedup"),
                "label": self.ratio.label(), SAMPLES_PER_S: self.samples_per_s,
                "threads": self.threads, "steps": self.steps, "contention": self.contention,
                "busy": self.busy, "run_dirs": self.run_dirs,
                "memory_per_rank": self.memory_per_rank}


def ab_test(a: RunConfig, b: RunConfig, rounds: int | None = None, steps: int | None = None,
            labels: tuple[str, str] = ("A", "B"), min_effect: float = MIN_EFFECT,
            on_run: Callable[[str, int, dict], None] | None = None,
            budget_s: float | None = None) -> ABResult:
    """Run A and B `rounds` times each, alternating, and compare their samples/s round by round.
    `budget_s` gives every run the same seconds of steps (`steps`, when given too, is the most)."""
    rounds = rounds or min_rounds()
    sized = {"run.steps": steps} if steps is not None else {}
    if budget_s is not None:
        sized = {"run.steps": steps or BUDGET_MAX_STEPS, "run.time_budget_s": budget_s}
    a, b = (c.replace(**sized) for c in (a, b))
    runs = run_rounds({labels[0]: a, labels[1]: b}, rounds, on_run=on_run)
    rates = {k: [s[SAMPLES_PER_S] for s in v] for k, v in runs.items()}
    ratio = paired_speed_ratio(rates[labels[0]], rates[labels[1]], min_effect)
    return ABResult(labels, ratio, rates, {k: v[0].get("threads") for k, v in runs.items()},
                    {k: [s.get("steps") for s in v] for k, v in runs.items()},
                    contention_of([s for v in runs.values() for s in v]),
                    {k: [s["run_dir"] for s in v] for k, v in runs.items()},
                    {k: sides(v[-1].get("memory_per_rank")) for k, v in runs.items()})


def sides(memory: dict | None) -> dict | None:
    """A run's memory_per_rank, predicted and measured: each rank's parts and peak."""
    return memory and {side: memory[side] for side in ("predicted", "measured")}


def _pair(measured, predicted) -> str:
    return f"{mib(measured or 0)} ({'-' if predicted is None else mib(predicted)})"


def rank_memory(memory: dict) -> str:
    """Each rank's held bytes (parameters + gradients + optimizer), saved activations and peak,
    measured with the prediction beside it."""
    out = []
    for want, got in zip(memory["predicted"], memory["measured"]):
        held = [sum(r.get(k, 0) for k in HELD) for r in (got, want)]
        out.append(f"rank {got[RANK]} {' + '.join(HELD)} {_pair(*held)}, {ACTIVATIONS} "
                   f"{_pair(got.get(ACTIVATIONS), want.get(ACTIVATIONS))}, {PEAK} "
                   f"{_pair(got.get(PEAK), want.get(PEAK))}")
    return "; ".join(out)

