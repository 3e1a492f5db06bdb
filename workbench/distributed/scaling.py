"""Scaling study: run one config at 1, 2, ... N processes and compare samples/s with ideal.

    python -m workbench.distributed.scaling --nproc 1 2 --steps 60   # the table and the explanation

- strong scaling: the global batch stays fixed and is split across ranks (or, with
  `accumulate=True`, every rank keeps its micro-batch and gradient accumulation shrinks as ranks
  are added, the usual way to keep a multi-GPU global batch on fewer devices);
- weak scaling: every rank keeps its batch, so the global batch grows with the ranks.
Ideal is the 1-process rate times the number of processes; efficiency is measured / ideal.
The 1-process run is shared by both modes.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

from ..config import ConfigError, RunConfig
from .launch import run


def plan(cfg: RunConfig, processes=(1, 2), modes=("strong", "weak"), accumulate: bool = False
         ) -> list[dict]:
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
                    raise ConfigError(f"with accumulate=True every process count must divide "
                                      f"{n_max}, got {n}")
                per_rank, accum = b, base_accum // n
            else:
                if b % n:
                    raise ConfigError(f"loader.batch_size ({b}) must be divisible by every process "
                                      f"count for strong scaling, got {n}; pick a batch such as {b - b % n or n}")
                per_rank, accum = b // n, 1
            key = (n, per_rank, accum)
            entries.append({"mode": mode, "processes": n, "batch_per_rank": per_rank,
                            "grad_accum_steps": accum, "global_batch": per_rank * accum * n,
                            "shared": key in seen})
            seen.setdefault(key, mode)
    return entries


def config_for(cfg: RunConfig, entry: dict) -> RunConfig:
    return cfg.replace(**{"distributed.nproc": entry["processes"], "distributed.nnodes": 1,
                          "loader.batch_size": entry["batch_per_rank"],
                          "optim.grad_accum_steps": entry["grad_accum_steps"],
                          "run.label": f"scaling-{entry['mode']}-{entry['processes']}p",
                          "run.save_weights": False})


def study(cfg: RunConfig, processes=(1, 2), modes=("strong", "weak"), accumulate: bool = False,
          on_result: Callable[[dict], None] | None = None, timeout_s: float | None = None,
          threads_per_process: int | None = 1):
    """Run the plan (one run at a time, so ranks do not compete with another study's) and return a
    DataFrame: measured and ideal samples/s, speedup and efficiency per mode and process count.

    Every process gets `threads_per_process` intra-op threads (torchrun's default for ranks is 1),
    so 1 process and N ranks are compared like for like; None leaves a lone process all cores."""
    import pandas as pd

    entries = plan(cfg, processes, modes, accumulate)
    results: dict[tuple, dict] = {}
    rows = []
    for e in entries:
        key = (e["processes"], e["batch_per_rank"], e["grad_accum_steps"])
        if key not in results:
            one = config_for(cfg, e).replace(**{"run.threads": threads_per_process or 0})
            results[key] = run(one, timeout_s=timeout_s)
        s = results[key]
        row = {k: v for k, v in e.items() if k != "shared"}
        row["threads_per_process"] = threads_per_process
        row.update(samples_per_s=s.get("samples_per_s"), step_time_ms=s.get("step_time_ms_median"),
                   status=s.get("status"), device=s.get("device"), run_dir=s.get("run_dir"))
        rows.append(row)
        add_ideal(rows)
        if on_result:
            on_result(rows[-1])
    return pd.DataFrame(add_ideal(rows))


def add_ideal(rows: list[dict]) -> list[dict]:
    """Ideal = the mode's 1-process (smallest count) rate times the process-count ratio."""
    for row in rows:
        same = [r for r in rows if r["mode"] == row["mode"] and r.get("samples_per_s")]
        base = min(same, key=lambda r: r["processes"], default=None)
        if base is None or not row.get("samples_per_s"):
            row.update(ideal_samples_per_s=None, speedup=None, efficiency=None)
            continue
        ideal = base["samples_per_s"] * row["processes"] / base["processes"]
        row.update(ideal_samples_per_s=round(ideal, 1),
                   speedup=round(row["samples_per_s"] / base["samples_per_s"], 3),
                   efficiency=round(row["samples_per_s"] / ideal, 3))
    return rows


def explain(df, cores: int | None = None) -> str:
    """A few sentences that read the table: what scaled, and why on this hardware."""
    cores = cores or os.cpu_count() or 1
    lines = []
    for mode, part in df.groupby("mode", sort=False):
        top = part.sort_values("processes").iloc[-1]
        if top["efficiency"] is None or top["processes"] == part["processes"].min():
            continue
        lines.append(f"{mode} scaling: {int(top['processes'])} processes reached "
                     f"{top['speedup']:.2f}x the 1-process rate ({top['efficiency']:.0%} of ideal).")
    if not lines:
        return "Run at least two process counts to see scaling."
    if (df["efficiency"].dropna() > 1.1).any():
        lines.append("Above ideal means the smaller run was slowed by something else: other work on "
                     "a shared machine, or a lone process given more threads than free cores. "
                     "Rerun when the machine is quiet before reading the numbers.")
    on_gpu = "device" in df and df["device"].astype(str).str.startswith("cuda").any()
    if not on_gpu:
        threads = df["threads_per_process"].iloc[0] if "threads_per_process" in df else None
        how = (f"Every process ran {threads} thread(s), as torchrun gives each rank, so the "
               "comparison is like for like. " if threads else
               "A lone process used every core while each rank had one thread. ")
        lines.append(
            f"This machine has {cores} CPU core(s). {how}Each rank is a whole PyTorch process; "
            "with as many ranks as cores they compete for the same cores (and with everything "
            "else running), and the gradient all-reduce (gloo, over loopback) adds a cost per "
            "step, so expect efficiency below 100%. Weak scaling usually looks better than strong "
            "because each rank keeps a full batch, so compute grows along with communication.")
    lines.append("On GPUs each rank has its own device; what is lost to ideal is the "
                 "communication share of a step (all-reduce of the gradients over NVLink or the "
                 "network), which larger batches and gradient accumulation amortize.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.distributed.scaling", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--modes", nargs="+", default=["strong", "weak"])
    p.add_argument("--accumulate", action="store_true")
    args = p.parse_args(argv)
    cfg = RunConfig.default().replace(**{"run.steps": args.steps, "run.eval_batches": 0})
    df = study(cfg, args.nproc, args.modes, args.accumulate,
               on_result=lambda r: print(f"{r['mode']:>6} {r['processes']}p: "
                                         f"{r['samples_per_s']} samples/s", flush=True))
    print(df.drop(columns=["run_dir"]).to_string(index=False))
    print(explain(df))
    return 0


if __name__ == "__main__":
    sys.exit(main())
