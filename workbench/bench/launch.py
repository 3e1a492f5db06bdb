"""Launch to first step: the workbench launcher against bare `torchrun` on the same worker, and
where the launch time goes; then samples/s with 2 ranks against 1 on this machine.

    python -m workbench.bench launch            # or: python -m workbench.bench.launch --rounds 6

Both launchers run 2 CPU ranks (gloo) of the same config, alternated round by round so load on a
shared machine hits both alike. "First step" is when every rank has logged step 1.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from ..config import RunConfig
from ..events import read_events
from ..distributed.launch import run, start_run
from ..runstore import create_run_dir
from ..measure.timer import summarize


def _first_step_t(run_dir, nproc: int, timeout_s: float = 300) -> float:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        firsts = {r["rank"]: r["t"] for r in read_events(run_dir) if r.get("event") == "step"}
        if len(firsts) >= nproc:
            return max(firsts.values())
        time.sleep(0.02)
    raise RuntimeError(f"no first step in {run_dir} after {timeout_s} s")


def workbench_launch(cfg: RunConfig) -> tuple[float, object]:
    t0 = time.time()
    handle = start_run(cfg)
    first = _first_step_t(handle.run_dir, cfg.distributed.nproc)
    handle.wait(300)
    return first - t0, handle.run_dir


def torchrun_launch(cfg: RunConfig) -> tuple[float, object]:
    run_dir = create_run_dir(cfg)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={cfg.distributed.nproc}", "-m", "workbench.worker",
           "--config", str(run_dir / "config.json")]
    t0 = time.time()
    with open(run_dir / "launcher.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    first = _first_step_t(run_dir, cfg.distributed.nproc)
    proc.wait(300)
    return first - t0, run_dir


def breakdown(run_dir, t0: float) -> dict[str, float]:
    """Seconds per phase of rank 0's launch, from its own records."""
    recs = [r for r in read_events(run_dir) if r.get("rank") == 0]
    first = {r["event"]: r for r in reversed(recs)}  # earliest record of each kind
    launch, start, ready, step = first["start"], first["init"], first["ready"], first["step"]
    created = launch.get("created_t") or launch["main_t"]
    return {"launcher + torchrun start, agent rendezvous": created - t0,
            "rank interpreter start": launch["main_t"] - created,
            "rank imports (torch, workbench)": start["t"] - launch["main_t"],
            "process-group rendezvous": ready.get("init_pg_s", 0.0),
            "data, model, DDP wrap, optimizer": ready["t"] - start["t"] - ready.get("init_pg_s", 0.0),
            "first step": step["t"] - ready["t"]}


def _launch_t0(run_dir) -> float:
    import json

    return json.loads((run_dir / "launch.json").read_text())["t"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.bench.launch", description=__doc__)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=150, help="steps of the samples/s runs")
    args = p.parse_args(argv)
    base = RunConfig.default().replace(**{"run.eval_batches": 0, "run.save_weights": False})
    launch_cfg = base.replace(**{"distributed.nproc": 2, "run.steps": 3, "run.label": "bench-launch"})

    times: dict[str, list[float]] = {"workbench": [], "torchrun": []}
    phases: list[dict] = []
    for i in range(args.rounds):
        order = [("workbench", workbench_launch), ("torchrun", torchrun_launch)]
        for name, fn in (order if i % 2 == 0 else order[::-1]):
            seconds, run_dir = fn(launch_cfg)
            times[name].append(seconds * 1e3)
            if name == "workbench":
                phases.append(breakdown(run_dir, _launch_t0(run_dir)))
        print(f"round {i + 1}: workbench {times['workbench'][-1] / 1e3:.2f} s, "
              f"torchrun {times['torchrun'][-1] / 1e3:.2f} s", flush=True)
    wb, tr = summarize(times["workbench"]), summarize(times["torchrun"])
    print(f"\nlaunch -> first step, 2 CPU ranks, medians of {args.rounds} interleaved rounds:")
    print(f"  bare torchrun --standalone  {tr.median_ms / 1e3:6.2f} s  (spread {tr.spread:.0%})")
    print(f"  workbench launcher          {wb.median_ms / 1e3:6.2f} s  (spread {wb.spread:.0%})")
    print(f"  ratio workbench / torchrun  {wb.median_ms / tr.median_ms:6.2f}x  (goal <= 1.10x)")
    print("\nwhere the workbench launch goes (rank 0, median seconds):")
    for phase in phases[0]:
        values = sorted(ph[phase] for ph in phases)
        print(f"  {phase:<44} {values[len(values) // 2]:6.2f}")

    # torchrun gives each rank one thread; a plain process uses every core: show both.
    variants = {"1 process, all cores": (1, None), "1 process, 1 thread": (1, "1"),
                "2 ranks, 1 thread each": (2, None)}
    rates: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(2):
        for name, (n, threads) in variants.items():
            s = run(base.replace(**{"distributed.nproc": n, "run.steps": args.steps,
                                    "run.label": f"bench-rate-{n}p"}),
                    env={"OMP_NUM_THREADS": threads} if threads else None)
            rates[name].append(s.get("samples_per_s") or 0.0)
    print(f"\nsamples/s in total, {base.model.name} width {base.model.width}, batch "
          f"{base.loader.batch_size} per rank, {os.cpu_count()} cores, medians of 2 interleaved runs:")
    med = {k: sorted(v)[len(v) // 2] for k, v in rates.items()}
    ref = med["1 process, all cores"] or 1.0
    for name, value in med.items():
        print(f"  {name:<24} {value:10,.0f}  ({value / ref:.2f}x)")
    print("  two ranks share this machine's cores and add a gradient all-reduce per step; a "
          "large spread here means other work held the cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
