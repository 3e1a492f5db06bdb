"""Threads on a quiet and on a busy machine: the default MLP and the default transformer trained
with 1 thread, 2 threads, 2 threads with a passive OpenMP wait, and the workbench's choice
(workbench.machine.threads), first idle, then while two busy processes hold the cores.

    python -m tools.bench contention            # or: --rounds 6 --seconds 8 --turns 2 --only mlp
    python -m tools.bench contention --conditions busy --rounds 12   # narrower busy intervals

Each round starts a fresh process per variant (OpenMP reads its wait policy once, at torch's
import), one after another, that builds the config's model and data as a rank does and runs 5
warm-up steps; the choice looks at the machine just before the round's processes start, as a
launch does, and where it asks for a thread trial its process first runs one over a run's warm-up
steps, as a rank does (workbench.train.thread_trial). Then the
processes take turns, one training while the others sleep (A B C D, D C B A, ...), and each
variant's rate in the round is its samples over its timed seconds, summed over its turns. Turns,
rather than one stretch a process, because beside busy processes a process's speed switches
between levels for seconds at a time (where the scheduler put its threads): spread over the round,
every variant meets the same levels. Turns of 4 s, not shorter: beside busy processes, a process
that slept while the others took their turns ran its threads faster than a run training without
pause does (presumably the scheduler's credit for the cores its session left idle; two passive
threads beside busy processes in sessions of their own ran the MLP at 14-15k samples/s in 0.5 s
turns, 7k in 4 s turns, and 5-6k in two of three real 10 s runs). Ratios are paired by round, with
their 95 % interval. Goals: the choice within 10 % of the best fixed setting in both conditions,
and at least 5x today's default (2 threads, spinning) under load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter

from workbench.trials.engine import order_of
from workbench.config import RunConfig
from workbench.machine.allocator import allocator_env
from workbench.machine.cpu import usable_cores
from workbench.machine.threads import (
    THREADS_ENV,
    TRIAL_ENV,
    WAIT_ENV,
    ThreadChoice,
    choose_threads,
    other_cores_now,
)
from workbench.measure.ratios import paired_speed_ratio
from workbench.procs import OtherWork
from workbench.profile.profiled_run import default_transformer
from workbench.quick import scaled
from .results import bench_command, machine_line, results_file, write_results

VARIANTS = ("1 thread", "2 threads", "2 threads, passive", "workbench's choice")
MODELS = {"mlp": RunConfig.default, "transformer": default_transformer}
GOAL_OF_BEST, GOAL_VS_DEFAULT_BUSY = 0.90, 5.0


def child(config_json: str) -> None:
    """Build the config's model and data, warm up, say "ready"; then train for the seconds each line
    of stdin names and answer each with the samples and seconds it timed, until stdin closes."""
    import torch

    from workbench.train.data import build_data, make_loader
    from workbench.train.models import build_model, loss_fn
    from workbench.train.precision import autocast, grad_scaler
    from workbench.train.step import StepParts, cycle_batches, make_optimizer, train_step
    from workbench.train.thread_trial import ThreadTrial
    from workbench.measure.warmup import warmup_steps

    cfg = RunConfig.from_dict(json.loads(config_json))
    torch.set_num_threads(int(os.environ["BENCH_THREADS"]))
    torch.manual_seed(0)
    device = torch.device("cpu")
    data = build_data(cfg)
    model = build_model(cfg, data, check=False)
    parts = StepParts(
        model,
        model,
        make_optimizer(cfg, model),
        grad_scaler(cfg, device),
        autocast(cfg, device),
        loss_fn(data.task),
        device,
    )
    batches = cycle_batches(make_loader(data.train, cfg, train=True, rank=0, world_size=1, seed=0))

    def step() -> int:
        return train_step(parts, batches)[1]

    trial = ThreadTrial.from_env(warmup_steps(cfg.run.steps))  # the choice on a busy machine, as a run
    for i in range(1, trial.steps + 1 if trial else 0):
        trial.before(i)
        t0 = time.perf_counter()
        step()
        trial.after(i, time.perf_counter() - t0)
    for _ in range(5):
        step()
    print(f"ready {torch.get_num_threads()}", flush=True)
    for line in sys.stdin:
        step()  # after a sleep the caches are cold again: not timed
        samples, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < float(line):
            samples += step()
        print(json.dumps({"samples": samples, "seconds": time.perf_counter() - t0}), flush=True)


class Contender:
    """One variant's process for one round: started warm, then trained turn by turn."""

    def __init__(self, cfg: RunConfig, variant: str, choice: ThreadChoice):
        env = {k: v for k, v in os.environ.items() if k not in (WAIT_ENV, TRIAL_ENV, THREADS_ENV)}
        env.update(allocator_env(cfg.run.allocator))  # the allocator a run of cfg starts with
        threads = 1 if variant == "1 thread" else 2
        if variant.endswith("passive"):
            env[WAIT_ENV] = "PASSIVE"
        if variant == "workbench's choice":
            threads = choice.threads
            env.update(choice.env())
        env["BENCH_THREADS"] = str(threads)
        self.wait = "passive" if env.get(WAIT_ENV) else "spin"
        self.setting = f"{threads}t {self.wait}"
        self.tried = f" (tried {env[TRIAL_ENV]})" if TRIAL_ENV in env else ""
        self.errors = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tools.bench.contention", "--child", cfg.to_json()],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
        )
        self.samples, self.seconds = 0, 0.0

    def answer(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            self.errors.seek(0)
            raise RuntimeError(f"a {self.setting} process ended early: {self.errors.read()[-2000:]}")
        return line

    def ready(self) -> None:
        """Waits until the process is warm; its setting is then the threads its trial kept."""
        threads = int(self.answer().split()[1])  # "ready 1"
        self.setting = f"{threads}t {self.wait}{self.tried}"

    def turn(self, seconds: float) -> None:
        self.proc.stdin.write(f"{seconds}\n")
        self.proc.stdin.flush()
        timed = json.loads(self.answer())
        self.samples += timed["samples"]
        self.seconds += timed["seconds"]

    def rate(self) -> float:
        return self.samples / self.seconds

    def stop(self) -> None:
        self.proc.stdin.close()  # the child's loop ends and it exits
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.errors.close()


def one_round(cfg: RunConfig, order: tuple[str, ...], seconds: float, turns: int) -> dict:
    """{variant: (samples/s, setting)} of one round: every variant's `seconds` in `turns` turns."""
    # the choice looks at the machine first, as a launch does before its ranks start: beside three
    # starting processes of its own, 8 looks at a quiet machine read 0.10-0.25 cores "other" (CPU
    # time the meter did not find in its own tree; why is not known), the busy threshold being 0.25
    choice = choose_threads(cfg, other_cores_now())
    contenders: dict[str, Contender] = {}
    try:
        for v in order:  # one after another, so a trial in a warm-up meets no other one starting
            contenders[v] = Contender(cfg, v, choice)
            contenders[v].ready()
        for t in range(turns):
            for v in order_of(order, t):
                contenders[v].turn(seconds / turns)
        return {v: (c.rate(), c.setting) for v, c in contenders.items()}
    finally:
        for c in contenders.values():
            c.stop()


def condition(name: str, models: list[str], rounds: int, seconds: float, turns: int) -> dict:
    rates = {(m, v): [] for m in models for v in VARIANTS}
    chosen: dict[str, Counter] = {m: Counter() for m in models}
    for r in range(rounds):
        order = order_of(VARIANTS, r)
        for m in models:
            for v, (rate, setting) in one_round(MODELS[m](), order, seconds, turns).items():
                rates[(m, v)].append(rate)
                if v == "workbench's choice":
                    chosen[m][setting] += 1
        print(f"  {name}: round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    return {"rates": rates, "chosen": chosen}


def report(name: str, result: dict, models: list[str]) -> list[str]:
    """The table of one condition and its goal lines."""
    lines, verdicts = [f"{name}:"], []
    for m in models:
        r = result["rates"]
        fixed = {v: statistics.median(r[(m, v)]) for v in VARIANTS[:3]}
        best = max(fixed, key=fixed.get)
        ran = ", ".join(f"{s} in {n} round(s)" for s, n in sorted(result["chosen"][m].items()))
        lines.append(f"  {m} (choice ran {ran}):")
        for v in VARIANTS:
            vs = paired_speed_ratio(r[(m, v)], r[(m, "workbench's choice")])
            lines.append(
                f"    {v:<20} {statistics.median(r[(m, v)]):>10,.0f} samples/s   choice vs this: {vs.label()}"
            )
        of_best = paired_speed_ratio(r[(m, best)], r[(m, "workbench's choice")])
        verdicts.append((f"{m}: choice vs the best fixed ({best})", of_best, GOAL_OF_BEST))
        if name == "busy":
            vs_default = paired_speed_ratio(r[(m, "2 threads")], r[(m, "workbench's choice")])
            verdicts.append(
                (f"{m}: choice vs today's default (2 threads, spinning)", vs_default, GOAL_VS_DEFAULT_BUSY)
            )
    for what, ratio, goal in verdicts:
        met = (
            "met"
            if ratio.low is not None and ratio.low >= goal
            else "not met"
            if ratio.high is not None and ratio.high < goal
            else "not decided"
        )
        lines.append(f"  goal {what} >= {goal:g}x: {ratio.label()} -> {met}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tools.bench contention",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rounds", type=int, default=scaled(6, 2))
    p.add_argument(
        "--seconds", type=float, default=scaled(8.0, 1.0), help="timed seconds of each variant in a round"
    )
    p.add_argument("--turns", type=int, default=2, help="turns those seconds are split into")
    p.add_argument("--only", nargs="+", choices=list(MODELS), default=list(MODELS))
    p.add_argument("--conditions", nargs="+", choices=["idle", "busy"], default=["idle", "busy"])
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name, value in (("--rounds", args.rounds), ("--turns", args.turns)):
        if value < 1:
            p.error(f"{name} must be at least 1, got {value}")
    if not args.seconds > 0:
        p.error(f"--seconds must be above 0, got {args.seconds:g}")
    if args.child:
        child(args.child)
        return 0
    lines = [
        "# Threads on a quiet and on a busy machine",
        "",
        f"Machine: {machine_line()}",
        "",
        f"{usable_cores()} usable cores; {args.rounds} rounds of {args.seconds:g} s per variant in "
        f"{args.turns} turns, variants alternating; ratios are the choice's samples/s over the "
        "other's, paired by round",
        "",
    ]
    print("\n".join(lines), flush=True)
    if "idle" in args.conditions:
        idle = condition("idle", args.only, args.rounds, args.seconds, args.turns)
        lines += report("idle", idle, args.only)
    if "busy" in args.conditions:
        with OtherWork(2):
            busy = condition("busy", args.only, args.rounds, args.seconds, args.turns)
        lines += report("busy", busy, args.only)
    write_results(lines, results_file("contention"), bench_command("contention", argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
