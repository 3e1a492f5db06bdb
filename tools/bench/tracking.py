"""What `workbench.track` costs a user's own loop: the digits MLP's training step (the default
config's model, data, batch and AdamW) bare, and the same step inside `with run.step(...)` with its
loss recorded, interleaved in one process (the trial engine's timed calls: A B, B A, ...), quiet and
beside two busy processes. Goal: at most 2 % per step.

    python -m tools.bench tracking [--rounds 30] [--out FILE]

Threads: the count a workbench run of the default config would get here (this node's usable
cores), the OpenMP wait policy as this process started; both are recorded with the result.
"""

from __future__ import annotations

import argparse
import datetime
import tempfile
from contextlib import nullcontext
from pathlib import Path

import torch

from workbench.config import RunConfig
from workbench.machine.threads import thread_count, wait_policy
from workbench.measure.ratios import paired_ratio
from workbench.procs import OtherWork
from workbench.trials.calls import timed_calls
from workbench.train.data import build_data, make_loader
from workbench.train.models import build_model, loss_fn
from workbench.train.rank import RankEnv
from workbench.train.step import cycle_batches
from workbench.tracking.tracked_run import Run
from .results import bench_command, machine_line, results_file, write_results

GOAL = 0.02
# Steps a timed call runs: quiet, enough that a round's noise is well under the 2 % being decided;
# busy, fewer, so the rounds stay short enough to pair
STEPS_A_CALL = {"quiet": 100, "busy": 20}


def step_functions(cfg: RunConfig, run: Run, n: int) -> dict:
    """Functions running `n` training steps of one default model: bare, a second bare
    (the A/A: what the method itself shows when nothing differs), and inside the tracker's step.
    All three train the same model on the same batches, so only the tracking differs."""
    torch.manual_seed(cfg.run.seed)
    data = build_data(cfg)
    model = build_model(cfg, data)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr)
    lossf = loss_fn(data.task)
    batches = cycle_batches(make_loader(data.train, cfg, train=True, seed=cfg.run.seed))

    def one():
        x, y = next(batches)
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss, len(x)

    def bare():
        for _ in range(n):
            one()

    def bare_again():
        for _ in range(n):
            one()

    def tracked():
        for _ in range(n):
            with run.step() as step:
                step.loss, step.samples = one()

    return {"bare": bare, "bare again": bare_again, "tracked": tracked}


def measure(cfg: RunConfig, rounds: int, n: int, folder: Path) -> dict:
    run = Run(folder, RankEnv(), {"label": "bench", "batch_size": cfg.loader.batch_size})
    try:
        t = timed_calls(step_functions(cfg, run, n), warmup=3, rounds=rounds)
    finally:
        run.finish()
    per_step = {k: v.median_ms / n for k, v in t.items()}
    return {
        **per_step,
        "steps": run.steps,  # ratios > 1: slower than bare
        "tracked_ratio": paired_ratio(t["tracked"].samples_ms, t["bare"].samples_ms),
        "aa_ratio": paired_ratio(t["bare again"].samples_ms, t["bare"].samples_ms),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tools.bench tracking",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rounds", type=int, default=100, help="paired rounds on the quiet machine")
    p.add_argument(
        "--busy-rounds",
        type=int,
        default=40,
        help="paired rounds beside two busy processes (each round is slower there)",
    )
    p.add_argument("--out", default=str(results_file("tracking")), help="the results file")
    args = p.parse_args(argv)
    cfg = RunConfig.default().replace(**{"run.device": "cpu"})
    threads, source = thread_count(cfg)
    torch.set_num_threads(threads)
    rows = []
    for condition, load, rounds, n in (
        ("quiet", nullcontext(), args.rounds, STEPS_A_CALL["quiet"]),
        ("beside two busy processes", OtherWork(2), args.busy_rounds, STEPS_A_CALL["busy"]),
    ):
        with load, tempfile.TemporaryDirectory() as tmp:
            rows.append((condition, measure(cfg, rounds, n, Path(tmp)) | {"rounds": rounds, "n": n}))
    lines = [
        "# What tracking your own loop costs",
        "",
        f"Measured {datetime.date.today()}. "
        f"Machine: {machine_line()}. The {cfg.model.name} (width {cfg.model.width}) on "
        f"{cfg.data.name}, batch {cfg.loader.batch_size}, AdamW; {threads} thread(s) "
        f"({source}), OpenMP wait {wait_policy()}. Each timed call runs the steps the table says; "
        f"rounds as the table says, after 3 calls of warm-up, the three variants interleaved, "
        "all training one model on the same batches. "
        "Overhead: the median per-round ratio of tracked time over bare time, minus 1, with "
        f"its 95 % interval. Goal: at most {GOAL:.0%}.",
        "",
        "| condition | rounds x steps a call | bare step | tracked step "
        "| tracking's overhead [95 % interval] | goal | A/A: bare against bare |",
        "|---|---|---|---|---|---|---|",
    ]
    for condition, r in rows:
        ratio, aa = r["tracked_ratio"], r["aa_ratio"]
        if ratio.low is None:
            interval, met = "(too few rounds for an interval)", "not decided"
        else:
            interval = f"[{ratio.low - 1:+.1%}, {ratio.high - 1:+.1%}]"
            met = (
                "met"
                if ratio.high <= 1 + GOAL
                else "missed"
                if ratio.low > 1 + GOAL
                else "not decided: the interval straddles it"
            )
        aa_text = (
            f"{aa.ratio - 1:+.1%} [{aa.low - 1:+.1%}, {aa.high - 1:+.1%}]"
            if aa.low is not None
            else f"{aa.ratio - 1:+.1%}"
        )
        lines.append(
            f"| {condition} | {r['rounds']} x {r['n']} | {r['bare']:.3f} ms | "
            f"{r['tracked']:.3f} ms | {ratio.ratio - 1:+.1%} {interval} | {met} | {aa_text} |"
        )
    write_results(lines, args.out, bench_command("tracking", argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
