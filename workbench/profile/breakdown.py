"""A profiled run folder read back as a breakdown: per rank, the phases of every profiled step beside
the step time the trainer measured, the median phases, the top operators, the memory, and the
verdict. Reading a folder imports nothing it names.

    b = read_breakdown("runs/20260101-120000_profile-transformer")
    b.step_ms, b.phases_ms, b.verdict.bound_by, b.memory.rows
    print(b.text()); b.as_dict()     # what `workbench profile` prints and its --json
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ..config import ConfigError
from ..events import EVENT, PROFILED, RANK, STEP, STEP_NUMBER, STEP_TIME_MS, WORLD_SIZE, read_events
from ..runfolder import RunFolder, read_json
from ..runstore import read_summary
from ..train.profiling import PHASES
from .memory_breakdown import MemoryBreakdown, memory_breakdown
from .breakdown_text import breakdown_text
from .bound_by import GROUPS, Verdict, bound_by, group_shares

SUM_TOLERANCE = 0.10  # the phases must add up to the measured step time within this


@dataclass
class RankProfile:
    rank: int
    steps: list  # per profiled step: step, step_time_ms (the trainer's clock), span_ms, phases_ms
    top_ops: list
    memory: dict
    trace: Path
    device: str
    threads: int

    @property
    def phases_ms(self) -> dict:
        """The median of each phase over the profiled steps."""
        return {p: statistics.median(s["phases_ms"][p] for s in self.steps) for p in PHASES}

    @property
    def step_ms(self) -> float:
        return statistics.median(s[STEP_TIME_MS] for s in self.steps)

    def step_gaps(self) -> list[float]:
        """Per profiled step, the gap between its phases and its measured time, as a fraction."""
        return [abs(sum(s["phases_ms"].values()) - s[STEP_TIME_MS]) / s[STEP_TIME_MS] for s in self.steps]

    def sum_error(self) -> float:
        """The largest gap between a step's phases and its measured time, as a fraction."""
        return max(self.step_gaps())

    def group_spread(self) -> tuple[dict, dict]:
        """Median group shares over the steps, and their lowest and highest."""
        per = [group_shares(s["phases_ms"], s.get("small_ops_ms", 0.0)) for s in self.steps]
        med = {g: statistics.median(p[g] for p in per) for g in GROUPS}
        return med, {g: (min(p[g] for p in per), max(p[g] for p in per)) for g in GROUPS}


@dataclass
class Breakdown:
    run_dir: Path
    config: dict
    ranks: list
    summary: dict
    verdict: Verdict
    memory: MemoryBreakdown
    notes: list = field(default_factory=list)

    @property
    def step_ms(self) -> float:
        return statistics.mean(r.step_ms for r in self.ranks)

    @property
    def phases_ms(self) -> dict:
        return {p: statistics.mean(r.phases_ms[p] for r in self.ranks) for p in PHASES}

    @property
    def unprofiled_step_ms(self) -> float | None:
        return self.summary.get("step_time_ms_median")

    def sum_error(self) -> float:
        return max(r.sum_error() for r in self.ranks)

    def as_dict(self) -> dict:
        return {
            "run_dir": str(self.run_dir),
            "step_ms": round(self.step_ms, 4),
            "phases_ms": {p: round(v, 4) for p, v in self.phases_ms.items()},
            "phases_per_rank_ms": {
                r.rank: {p: round(v, 4) for p, v in r.phases_ms.items()} for r in self.ranks
            },
            "unprofiled_step_ms": self.unprofiled_step_ms,
            "sum_error": round(self.sum_error(), 4),
            "bound_by": self.verdict.bound_by,
            "verdict": self.verdict.as_dict(),
            "params": self.summary.get("params"),
            "memory_bytes": self.memory.bytes,
            "memory": self.memory.as_dict(),
            "top_ops": self.ranks[0].top_ops,
            "profiled_steps": [s[STEP_NUMBER] for s in self.ranks[0].steps],
            "threads": self.ranks[0].threads,
            "device": self.ranks[0].device,
            WORLD_SIZE: len(self.ranks),
            "traces": [str(r.trace) for r in self.ranks],
            "memory_per_rank": self.summary.get("memory_per_rank"),
            "notes": self.notes,
        }

    def text(self, top: int = 10, tables: bool = True) -> str:
        return breakdown_text(self, top, tables)

    def ops_frame(self, top: int = 10, rank: int = 0):
        """The top operators of one rank as a DataFrame (time per step, calls, shapes, phase)."""
        import pandas as pd

        df = pd.DataFrame(self.ranks[rank].top_ops[:top])
        first = [
            c
            for c in (
                "name",
                "phase",
                "device_ms_per_step",
                "self_ms_per_step",
                "calls_per_step",
                "input_shapes",
            )
            if c in df.columns
        ]
        return df[first]


def _rank_profile(run_dir: Path, path: Path, step_records: dict) -> RankProfile:
    data = read_json(path)
    rank = data[RANK]
    steps = []
    for n, s in zip(data["profiled_steps"], data["steps"]):
        rec = step_records.get((rank, n))
        if rec is None:
            raise ConfigError(
                f"{path.name}: step {n} has no step record in {RunFolder(run_dir).events_file(rank).name}"
            )
        steps.append({STEP_NUMBER: n, STEP_TIME_MS: rec[STEP_TIME_MS], **s})
    if not steps:
        raise ConfigError(f"{path.name} holds no profiled step")
    return RankProfile(
        rank, steps, data["top_ops"], data["memory"], run_dir / data["trace"], data["device"], data["threads"]
    )


def read_breakdown(run_dir: str | Path, recommended_dtype: str | None = None) -> Breakdown:
    """The breakdown of a profiled run (a run with run.profile_steps > 0), from its files only."""
    run_dir = Path(run_dir)
    folder = RunFolder(run_dir)
    files = folder.profile_files()
    if not files:
        raise ConfigError(
            f"{str(run_dir)!r} holds no {folder.profile_file('*').name}: profile a "
            "config with workbench.profile.profiled_run.profile (or run.profile_steps > 0)"
        )
    config = folder.config_data()
    records = {
        (r.get(RANK, 0), r[STEP_NUMBER]): r
        for r in read_events(run_dir)
        if r.get(EVENT) == STEP and r.get(PROFILED)
    }
    ranks = [_rank_profile(run_dir, f, records) for f in files]
    summary = read_summary(run_dir)
    shares, spread = ranks[0].group_spread() if len(ranks) == 1 else _mean_spread(ranks)
    verdict = bound_by(shares, spread, config, ranks[0].device, recommended_dtype)
    notes = []
    if summary.get("contention", {}).get("busy"):
        notes.append("other programs kept this machine busy during the run: the times are unreliable")
    err = max(r.sum_error() for r in ranks)
    if err > SUM_TOLERANCE:
        notes.append(
            f"a profiled step's phases missed its measured time by {err:.0%} (more than "
            f"{SUM_TOLERANCE:.0%}): this breakdown is unreliable"
        )
    slow = [r.rank for r in ranks if r.step_ms > 1.25 * min(x.step_ms for x in ranks)]
    if slow:
        notes.append(f"rank(s) {slow} took over 1.25x the fastest rank's step")
    before_model = (folder.launch() or {}).get("precheck") or {}  # rank 0's base and data memory
    return Breakdown(
        run_dir, config, ranks, summary, verdict, memory_breakdown(ranks[0].memory, before_model), notes
    )


def _mean_spread(ranks: list) -> tuple[dict, dict]:
    per = [r.group_spread() for r in ranks]
    shares = {g: statistics.mean(m[g] for m, _ in per) for g in GROUPS}
    spread = {g: (min(s[g][0] for _, s in per), max(s[g][1] for _, s in per)) for g in GROUPS}
    return shares, spread
