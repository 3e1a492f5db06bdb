"""The A/B test of two training configs, through the trial engine (workbench.trials.engine): both
are built once in warm host processes, from the same seed, and their steps alternate in short slices
(A B B A ...); each pair of neighbouring slices gives one ratio of samples/s, and the result is the
median ratio with its interval, the verdict, the pairs used and dropped and the conditions.

    result = ab_test(cfg, cfg.replace(**{"precision.dtype": "bf16"}), rounds=8)
    print(result.text())    # 'B vs A: 1.31x [1.18, 1.44] over 8 pairs, quiet: faster ...'

Two configs that one process can host (precision, layout, optimizer, batch, checkpointing,
compile) share one; a side with ranks, loader workers or threads of its own gets its own warm
process (workbench.trials.hosts). An A/A test (the same config on both sides) comes out within
noise: that is how to know the method is honest on this machine, busy or not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..config import RunConfig
from ..disk import mib
from ..events import RANK, SAMPLES_PER_S
from ..machine.capability import resolve_device
from ..machine.contention import BUSY_CORES
from ..machine.fit import cannot_run
from ..measure.ratios import Ratio, min_rounds
from ..measure.verdict import MIN_EFFECT
from ..train.sharding import ACTIVATIONS, HELD, PEAK
from .engine import SLICE_S, Comparison, Slice, Trial
from .hosts import TrainingHosts, TrialError


@dataclass
class ABResult:
    labels: tuple[str, str]
    comparison: Comparison  # B against A
    samples_per_s: dict = field(default_factory=dict)  # label -> one figure per counted slice
    threads: dict = field(default_factory=dict)  # label -> intra-op threads per process
    steps: dict = field(default_factory=dict)  # label -> steps of each counted slice
    contention: dict = field(default_factory=dict)
    folder: str = ""  # the trial folder: every slice (slices.jsonl), each side's config and events
    threads_why: str = ""
    # label -> {"predicted": [...], "measured": [...]}: each rank's bytes, by part (several ranks)
    memory_per_rank: dict = field(default_factory=dict)
    differences: dict = field(default_factory=dict)  # field -> (A's value, B's value)
    matmuls: list = field(default_factory=list)  # A's matrix products, when asked (train.matmul_shapes)

    def sides_text(self) -> str:
        """What the two sides differ in, said first: a ratio measures all of it together."""
        if not self.differences:
            return "A and B are the same config: an A/A test, whose verdict should be within noise"
        named = "; ".join(
            f"{k}: {json.dumps(a)} (A) vs {json.dumps(b)} (B)" for k, (a, b) in self.differences.items()
        )
        more = (
            f" (the sides differ in {len(self.differences)} settings: the ratio measures them "
            "together, not one alone)"
            if len(self.differences) > 1
            else ""
        )
        return f"A and B differ in {named}{more}"

    @property
    def ratio(self) -> Ratio:  # speed of B over A
        return self.comparison.ratio

    @property
    def busy(self) -> bool:
        return bool(self.contention.get("busy"))

    def text(self) -> str:
        a, b = self.labels
        lines = [self.sides_text(), f"{b} vs {a}: {self.comparison.text()}"]
        for label in self.labels:
            rates = ", ".join(f"{v:,.0f}" for v in self.samples_per_s[label])
            steps = self.steps.get(label) or []
            ran = f", {min(steps)}-{max(steps)} steps a slice" if steps else ""
            lines.append(
                f"  {label}: samples/s per slice {rates} ({self.threads[label]} thread(s) per process{ran})"
            )
        for label in self.labels:
            memory = self.memory_per_rank.get(label)
            if memory:
                lines.append(f"  {label}: per rank, measured (predicted): {rank_memory(memory)}")
        lines.append(f"  threads: {self.threads_why}")
        lines.append(f"  every slice: {self.folder}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {
            "a": self.labels[0],
            "b": self.labels[1],
            "differences": {k: list(v) for k, v in self.differences.items()},
            **self.comparison.as_dict("speedup"),
            "label": self.comparison.text(),
            SAMPLES_PER_S: self.samples_per_s,
            "threads": self.threads,
            "threads_why": self.threads_why,
            "steps": self.steps,
            "contention": self.contention,
            "busy": self.busy,
            "folder": self.folder,
            "memory_per_rank": self.memory_per_rank,
        }


def ab_test(
    a: RunConfig,
    b: RunConfig,
    rounds: int | None = None,
    labels: tuple[str, str] = ("A", "B"),
    *,
    slice_s: float = SLICE_S,
    min_effect: float = MIN_EFFECT,
    on_slice: Callable[[Slice], None] | None = None,
    stop: Callable[[], bool] | None = None,
    folder: str | Path | None = None,
    matmuls: bool = False,
) -> ABResult:
    """`rounds` pairs of slices of A and B (default: the fewest that carry a 95 % interval), each
    about `slice_s` seconds of steps; see the module. `matmuls`: also report A's matrix products
    (what a precision A/B's reason places on this machine's size curve).

    :param a: side A's config, the reference: the ratio is B's samples/s over A's.
    :param b: side B's config.
    :param rounds: the pairs to count (a pair dropped because the load changed inside it is measured
        again, up to as many extra rounds); None: the fewest that carry a 95 % interval.
    :param labels: the two sides' names, A's then B's; they must differ.
    :param slice_s: seconds of training steps in each slice.
    :param min_effect: the smallest relative change (0.05: 5 %) that the verdict calls faster or slower.
    :param on_slice: called with each slice as it ends, warm-up slices included; None: nothing is called.
    :param stop: asked before each round; True ends the test with the rounds done so far. None: every
        round runs.
    :param folder: the trial folder (every slice, each side's config and events); None: a fresh one in
        the run store's trials/ folder.
    :param matmuls: also report A's matrix products, in the result's `matmuls`; False: that list is empty.
    """
    rounds = rounds or min_rounds()
    if labels[0] == labels[1]:
        raise ValueError(f"the two sides need different labels, got {labels[0]!r} twice")
    for label, cfg in zip(labels, (a, b)):  # what the machine cannot run: refused before any folder
        reason = cannot_run(cfg, resolve_device(cfg.run.device))
        if reason:
            raise TrialError(f"{label}: {reason}")
    with TrainingHosts(a, folder) as hosts:
        for label, cfg in zip(labels, (a, b)):
            hosts.add(label, cfg)
        shapes = hosts.variants[labels[0]].matmuls(labels[0]) if matmuls else []

        def heard(s: Slice) -> None:
            hosts.record(s)
            if on_slice is not None:
                on_slice(s)

        trial = Trial(
            hosts.of(labels), labels[0], slice_s=slice_s, min_effect=min_effect, on_slice=heard
        ).run(rounds, stop)
        memory = {
            label: sides(hosts.variants[label].memory(label))
            for label, cfg in zip(labels, (a, b))
            if cfg.distributed.world_size > 1
        }
        comparison = trial.compare(labels[1])
        counted = {k: trial.slices[k] for k in labels}
        return ABResult(
            labels,
            comparison,
            {k: [round(s.rate, 2) for s in v] for k, v in counted.items()},
            {k: (v[0].threads if v else None) for k, v in counted.items()},
            {k: [s.steps for s in v] for k, v in counted.items()},
            load_of(comparison),
            str(hosts.folder),
            hosts.threads.why,
            memory,
            a.differences(b),
            shapes,
        )


def load_of(c: Comparison) -> dict:
    """What other programs did over the kept pairs: the worst and the median reading."""
    other = sorted(c.other_cores)
    if not other:
        return {"busy": None, "pairs": 0, "dropped": c.dropped}
    return {
        "other_cpu_cores_max": other[-1],
        "other_cpu_cores_median": other[len(other) // 2],
        "busy_pairs": c.busy_pairs,
        "pairs": c.pairs,
        "dropped": c.dropped,
        "busy": other[-1] >= BUSY_CORES,
        "conditions": c.conditions,
    }


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
        out.append(
            f"rank {got[RANK]} {' + '.join(HELD)} {_pair(*held)}, {ACTIVATIONS} "
            f"{_pair(got.get(ACTIVATIONS), want.get(ACTIVATIONS))}, {PEAK} "
            f"{_pair(got.get(PEAK), want.get(PEAK))}"
        )
    return "; ".join(out)
