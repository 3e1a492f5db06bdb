"""Threads on a quiet and on a busy machine: the default MLP and the default transformer trained
with 1 thread, 2 threads, 2 threads with a passive OpenMP wait, and the workbench's choice
(workbench.machine.threads), first idle, then while two busy processes hold the cores.

    python -m workbench.bench contention            # or: --rounds 6 --seconds 2 --only mlp
    python -m workbench.bench contention --conditions busy --rounds 12   # narrower busy intervals

Every measurement is a fresh process (OpenMP reads its wait policy once, at torch's import) that
builds the config's model and data as a rank does, runs 5 warm-up steps, then trains for a fixed
time and prints its samples/s. The variants alternate within each round (A B C D, then D C B A);
the choice looks at the machine just before its process starts, as a launch does. Ratios are
paired by round, with their 95 % interval. Goals: the choice within 10 % of the best fixed
setting in both conditions, and at least 5x today's default (2 threads, spinning) under load.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from ..config import RunConfig
from ..events import SAMPLES_PER_S
from ..machine.cpu import usable_cores
from ..machine.threads import WAIT_ENV, choose_threads, other_cores_now
from ..measure.compare import paired_speed_ratio
from ..procs import OtherWork
from ..profile.run import default_transformer
from ..quick import scaled

VARIANTS = ("1 thread", "2 threads", "2 threads, passive", "workbench's choice")
MODELS = {"mlp": RunConfig.default, "transformer": default_transformer}
GOAL_OF_BEST, GOAL_VS_DEFAULT_BUSY = 0.90, 5.0


def child(config_json: str, seconds: float) -> None:
    """Train the config in this process for `seconds` after warm-up; print samples/s."""
    import torch

    from ..train.data import build_data, make_loader
    from ..train.models import build_model, loss_fn
    from ..train.precision import autocast, grad_scaler
    from ..train.step import StepParts, cycle_batches, make_optimizer, train_step

    cfg = RunConfig.from_dict(json.loads(config_json))
    torch.set_num_threads(int(os.environ["BENCH_THREADS"]))
    torch.manual_seed(0)
    device = torch.device("cpu")
    data = build_data(cfg)
    model = build_model(cfg, data, check=False)
    parts = StepParts(model, model, make_optimizer(cfg, model), grad_scaler(cfg, device),
                      autocast(cfg, device), loss_fn(data.task), device)
    batches = cycle_batches(make_loader(data.train, cfg, train=True, rank=0, world_size=1, seed=0))

    def step() -> int:
        return train_step(parts, batches)[1]

    for _ in range(5):
        step()
    samples, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        samples += step()
    print(json.dumps({SAMPLES_PER_S: samples / (time.perf_counter() - t0)}))


def measure(cfg: RunConfig, variant: str, seconds: float) -> tuple[float, str]:
    """samples/s of one fresh process, and the setting it ran (threads, wait)."""
    env = {k: v for k, v in os.environ.items() if k not in (WAIT_ENV, "WORKBENCH_THREADS")}
    threads = 1 if variant == "1 thread" else 2
    if variant.endswith("passive"):
        env[WAIT_ENV] = "PASSIVE"
    if variant == "workbench's choice":
        choice = choose_threads(cfg, other_cores_now())
        threads = choice.threads
        env.update(choice.env())
    env["BENCH_THREADS"] = str(threads)
    out = subprocess.run([sys.executable, "-m", "workbench.bench.contention", "--child", cfg.to_json(),
                          "--seconds", str(seconds)], env=env, capture_output=True, text=True,
                         timeout=600, check=True)
    setting = f"{threads}t {'passive' if env.get(WAIT_ENV) else 'spin'}"
    return json.loads(out.stdout.strip().splitlines()[-1])[SAMPLES_PER_S], setting


def condition(name: str, models: list[str], rounds: int, seconds: float) -> dict:
    rates = {(m, v): [] for m in models for v in VARIANTS}
    chosen: dict[str, set] = {m: set() for m in models}
    for r in range(rounds):
        order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
        for m in models:
            for v in order:
                rate, setting = measure(MODELS[m](), v, seconds)
                rates[(m, v)].append(rate)
                if v == "workbench's choice":
                    chosen[m].add(setting)
        print(f"  {name}: round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    return {"rates": rates, "chosen": chosen}


def report(name: str, result: dict, models: list[str]) -> list[str]:
    """The table of one condition and its goal lines."""
    lines, verdicts = [f"{name}:"], []
    for m in models:
        r = result["rates"]
        fixed = {v: statistics.median(r[(m, v)]) for v in VARIANTS[:3]}
        best = max(fixed, key=fixed.get)
        lines.append(f"  {m} (choice ran {', '.join(sorted(result['chosen'][m]))}):")
        for v in VARIANTS:
            vs = paired_speed_ratio(r[(m, v)], r[(m, "workbench's choice")])
            lines.append(f"    {v:<20} {statistics.median(r[(m, v)]):>10,.0f} samples/s   "
                         f"choice vs this: {vs.label()}")
        of_best = paired_speed_ratio(r[(m, best)], r[(m, "workbench's choice")])
        verdicts.append((f"{m}: choice vs the best fixed ({best})", of_best, GOAL_OF_BEST))
        if name == "busy":
            vs_default = paired_speed_ratio(r[(m, "2 threads")], r[(m, "workbench's choice")])
            verdicts.append((f"{m}: choice vs today's default (2 threads, spinning)", vs_default,
                             GOAL_VS_DEFAULT_BUSY))
    for what, ratio, goal in verdicts:
        met = ("met" if ratio.low is not None and ratio.low >= goal else
               "not met" if ratio.high is not None and ratio.high < goal else "not decided")
        lines.append(f"  goal {what} >= {goal:g}x: {ratio.label()} -> {met}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.bench contention", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=scaled(6, 2))
    p.add_argument("--seconds", type=float, default=scaled(2.0, 0.5), help="timed seconds a process")
    p.add_argument("--only", nargs="+", choices=list(MODELS), default=list(MODELS))
    p.add_argument("--conditions", nargs="+", choices=["idle", "busy"], default=["idle", "busy"])
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child, args.seconds)
        return 0
    print(f"{usable_cores()} usable cores; {args.rounds} rounds of {args.seconds:g} s per process, "
          "variants alternating; ratios are the choice's samples/s over the other's, paired by round")
    lines = []
    if "idle" in args.conditions:
        lines += report("idle", condition("idle", args.only, args.rounds, args.seconds), args.only)
    if "busy" in args.conditions:
        with OtherWork(2):
            busy = condition("busy", args.only, args.rounds, args.seconds)
        lines += report("busy", busy, args.only)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
