"""Scaling study: run one config at 1, 2, ... N processes and compare samples/s with ideal.

    python -m workbench.trials.scaling --nproc 1 2 --steps 60   # the table and the explanation

- strong scaling: the global batch stays fixed and is split across ranks (or, with
  `accumulate=True`, every rank keeps its micro-batch and gradient accumulation shrinks as ranks
  are added, the usual way to keep a multi-GPU global batch on fewer devices);
- weak scaling: every rank keeps its batch, so the global batch grows with the ranks.
Ideal is the 1-process rate times the number of processes; efficiency is measured / ideal.
The 1-process run is shared by both modes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Callable

from ..config import ConfigError, RunConfig
from ..events import SAMPLES_PER_S, STEP_TIME_MS
from ..machine.capability import resolve_device
from ..machine.cpu import usable_cores
from ..machine.fit import cannot_run
from ..measure.ratios import min_rounds, paired_speed_ratio, speedup_text
from .engine import SLICE_S, Trial
from .hosts import TrainingHosts


def plan(cfg: RunConfig, processes=(1, 2), modes=("strong", "weak"), accumulate: bool = False) -> list[dict]:
    """One entry per run to make: mode, processes, batch per rank, accumulation, global batch."""
    processes = sorted(set(processes))
    if not processes or processes[0] < 1:
        raise ConfigError(f"processes must be integers >= 1, got {processes!r}")
    unknown = set(modes) - {"strong", "weak"}
    if unknown:
        raise ConfigError(f"modes must be 'strong' and/or 'weak', got {sorted(unknown)!r}")
    b, n_max = cfg.loader.batch_size, processes[-1]
    base_accum = n_max if accumulate else 1  # strong + accumulate: 1 process accumulates n_max
    entries, seen = [], {}
    for mode in modes:
        for n in processes:
            if mode == "weak":
                per_rank, accum = b, 1
            elif accumulate:
                if n_max % n:
                    raise ConfigError(
                        f"with accumulate=True every process count must divide {n_max}, got {n}"
                    )
                per_rank, accum = b, base_accum // n
            else:
                if b % n:
                    raise ConfigError(
                        f"loader.batch_size ({b}) must be divisible by every process "
                        f"count for strong scaling, got {n}; "
                        f"pick a batch such as {b - b % n or n}"
                    )
                per_rank, accum = b // n, 1
            key = (n, per_rank, accum)
            entries.append(
                {
                    "mode": mode,
                    "processes": n,
                    "batch_per_rank": per_rank,
                    "grad_accum_steps": accum,
                    "global_batch": per_rank * accum * n,
                    "shared": key in seen,
                }
            )
            seen.setdefault(key, mode)
    return entries


def config_for(cfg: RunConfig, entry: dict) -> RunConfig:
    return cfg.replace(
        **{
            "distributed.nproc": entry["processes"],
            "distributed.nnodes": 1,
            "loader.batch_size": entry["batch_per_rank"],
            "optim.grad_accum_steps": entry["grad_accum_steps"],
            "run.label": f"scaling-{entry['mode']}-{entry['processes']}p",
            "run.save_weights": False,
        }
    )


def study(
    cfg: RunConfig,
    processes=(1, 2),
    modes=("strong", "weak"),
    accumulate: bool = False,
    on_update: Callable[[list[dict]], None] | None = None,
    timeout_s: float | None = None,
    threads_per_process: int | None = None,
    rounds: int = 1,
    slice_s: float = SLICE_S,
):
    """Run the plan through the trial engine and return a DataFrame: measured and ideal samples/s,
    speedup (with its interval over `rounds` pairs of slices) and efficiency per mode and process
    count. Each process count is built once in a warm host of its own (a torchrun group for
    several), and their slices alternate round by round; one at a time, so ranks never compete
    with another variant of the study.

    Threads: by default (None) every process gets this node's usable cores shared by its ranks
    (run.threads=0), so 1 process x 2 threads and 2 ranks x 1 thread use the same cores in total,
    and the table says so; an integer gives every process that many. `on_update(rows)` after every
    round."""
    import pandas as pd

    entries = plan(cfg, processes, modes, accumulate)
    device = resolve_device(cfg.run.device)
    configs: dict[str, RunConfig] = {}
    skipped: dict[str, str] = {}  # what the launch would refuse here, in its words: not run
    for e in entries:
        key = _key(e)
        c = config_for(cfg, e).replace(**{"run.threads": threads_per_process or 0})
        reason = cannot_run(c, device)
        if reason:
            skipped[key] = reason
        else:
            configs.setdefault(key, c)
    trial: Trial | None = None
    built: dict[str, dict] = {}

    def rows() -> list[dict]:
        out = []
        for e in entries:
            row = {k: v for k, v in e.items() if k != "shared"}
            key = _key(e)
            if key in skipped:
                out.append({**row, "status": "skipped", "reason": skipped[key], "_rates": []})
                continue
            done = trial.slices[key] if trial is not None else []
            threads = done[0].threads if done else None
            row.update(
                {
                    "threads_per_process": threads,
                    "total_threads": threads * e["processes"] if threads else None,
                    SAMPLES_PER_S: statistics.median(s.rate for s in done) if done else None,
                    STEP_TIME_MS: statistics.median(s.wall_s / s.steps * 1e3 for s in done) if done else None,
                    "rounds": len(done),
                    "status": "completed" if done else "not run",
                    "device": str(device),
                    "run_dir": built.get(key, {}).get("run_dir"),
                    "other_cpu_cores": max((s.other_cores or 0.0) for s in done) if done else None,
                }
            )
            row["_rates"] = [s.rate for s in done]
            out.append(row)
        return add_ideal(out)

    if on_update is not None and skipped:
        on_update(rows())
    if configs:
        first = next(iter(configs.values()))
        with TrainingHosts(first, timeout_s=timeout_s or 900) as hosts:
            for key, c in configs.items():
                built[key] = hosts.add(key, c)
            trial = Trial(hosts.of(configs), slice_s=slice_s, on_slice=hosts.record)
            trial.run(rounds, on_round=None if on_update is None else lambda: on_update(rows()))
    return pd.DataFrame(rows()).drop(columns=["_rates"])


def _median(runs: list[dict], key: str):
    return statistics.median(s[key] for s in runs) if runs else None


def _key(entry: dict) -> str:
    return f"{entry['processes']}p-b{entry['batch_per_rank']}-a{entry['grad_accum_steps']}"


def add_ideal(rows: list[dict]) -> list[dict]:
    """Ideal = the mode's 1-process (smallest count) rate times the process-count ratio; the
    speedup is paired over rounds when the rows carry their per-round rates (`_rates`)."""
    for row in rows:
        same = [r for r in rows if r["mode"] == row["mode"] and r.get(SAMPLES_PER_S)]
        base = min(same, key=lambda r: r["processes"], default=None)
        if base is None or not row.get(SAMPLES_PER_S):
            row.update(
                ideal_samples_per_s=None, speedup=None, speedup_low=None, speedup_high=None, efficiency=None
            )
            continue
        ideal = base[SAMPLES_PER_S] * row["processes"] / base["processes"]
        a, b = base.get("_rates"), row.get("_rates")
        if a and b:
            n = min(len(a), len(b))
            ratio = paired_speed_ratio(a[:n], b[:n])
            speedup, low, high = ratio.ratio, ratio.low, ratio.high
        else:
            speedup, low, high = row[SAMPLES_PER_S] / base[SAMPLES_PER_S], None, None
        row.update(
            ideal_samples_per_s=round(ideal, 1),
            speedup=round(speedup, 3),
            speedup_low=low,
            speedup_high=high,
            efficiency=round(row[SAMPLES_PER_S] / ideal, 3),
        )
    return rows


def explain(df, cores: int | None = None) -> str:
    """A few sentences that read the table: what scaled, and why on this hardware."""
    cores = cores or usable_cores()
    lines = []
    if "reason" in df:
        for r in df[df["status"] == "skipped"].drop_duplicates("processes").itertuples():
            lines.append(f"{r.processes} process(es) not run on this machine: {r.reason}.")
    for mode, part in df.groupby("mode", sort=False):
        part = part[part["efficiency"].notna()]
        if part.empty:
            continue
        top = part.sort_values("processes").iloc[-1]
        if top["processes"] == part["processes"].min():
            continue
        low, high = top.get("speedup_low"), top.get("speedup_high")
        over = f" over {int(top['rounds'])} round(s)" if "rounds" in top else ""
        lines.append(
            f"{mode} scaling: {int(top['processes'])} processes reached "
            f"{speedup_text(top['speedup'], low, high)} the 1-process rate{over} "
            f"({top['efficiency']:.0%} of ideal)"
            + (
                "."
                if low == low and low is not None
                else f"; {min_rounds()} rounds would give it an interval."
            )
        )
    if not any("scaling:" in line for line in lines):
        return "\n".join(lines + ["Run at least two process counts to see scaling."])
    if (df["efficiency"].dropna() > 1.1).any():
        lines.append(
            "Above ideal means the smaller run was slowed by something else: other work on "
            "a shared machine, or a lone process given more threads than free cores. "
            "Rerun when the machine is quiet before reading the numbers."
        )
    on_gpu = "device" in df and df["device"].astype(str).str.startswith("cuda").any()
    if not on_gpu:
        how = threads_sentence(df)
        lines.append(
            f"This machine has {cores} CPU core(s). {how}Each rank is a whole PyTorch process; "
            "with as many ranks as cores they compete for the same cores (and with everything "
            "else running), and the gradient all-reduce (gloo, over loopback) adds a cost per "
            "step, so expect efficiency below 100%. Weak scaling usually looks better than strong "
            "because each rank keeps a full batch, so compute grows along with communication."
        )
    lines.append(
        "On GPUs each rank has its own device; what is lost to ideal is the "
        "communication share of a step (all-reduce of the gradients over NVLink or the "
        "network), which larger batches and gradient accumulation amortize."
    )
    return "\n".join(lines)


def threads_sentence(df) -> str:
    """What the study held equal: total threads, or threads per process."""
    if "threads_per_process" not in df or df["threads_per_process"].isna().all():
        return ""
    parts = ", ".join(
        f"{int(r.processes)} x {int(r.threads_per_process)}"
        for r in df.drop_duplicates("processes").itertuples()
        if r.threads_per_process
    )
    totals = set(df["total_threads"].dropna())
    held = (
        f"the same {int(totals.pop())} thread(s) in total, so the comparison is of processes, not of cores"
        if len(totals) == 1
        else "a different number of threads in total"
    )
    return f"Processes x threads each: {parts}: {held}. "


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m workbench.trials.scaling",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--modes", nargs="+", default=["strong", "weak"])
    p.add_argument("--accumulate", action="store_true")
    p.add_argument("--rounds", type=int, default=6, help="pairs of slices (6 give an interval)")
    args = p.parse_args(argv)
    cfg = RunConfig.default().replace(**{"run.steps": args.steps, "run.eval_batches": 0})
    df = study(
        cfg,
        args.nproc,
        args.modes,
        args.accumulate,
        rounds=args.rounds,
        on_update=lambda rows: print(f"{sum(r['rounds'] for r in rows)} runs measured", flush=True),
    )
    print(df.drop(columns=["run_dir"]).to_string(index=False))
    print(explain(df))
    return 0


if __name__ == "__main__":
    sys.exit(main())
