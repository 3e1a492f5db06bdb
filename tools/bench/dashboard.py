"""Does watching a run slow it down, and does drawing stay cheap as the run grows?

1. The same training run with the live dashboard attached (its tailer thread and throttled chart
   redraws in this process, as in a notebook) against no dashboard, alternating A B B A so drift on
   a shared machine hits both alike. Goal: at most 5 % fewer samples/s with the dashboard.
2. One redraw of the live charts after 1,000 and after 1,000,000 steps (the same records the
   worker writes, fed through the dashboard's own series), interleaved. Goal: the long run's
   redraw costs at most 2x the short one's.

    python -m tools.bench.dashboard [--rounds 6] [--steps 300]   # or: python -m tools.bench dashboard
"""

from __future__ import annotations

import argparse
import statistics
import time

from workbench.trials.engine import order_of
from workbench.config import RunConfig
from workbench.distributed.launch import start_run
from workbench.events import (
    ATTEMPT,
    DATA_WAIT_MS,
    EVENT,
    LOSS,
    RANK,
    RSS_GIB,
    SAMPLES_PER_S,
    STEP,
    STEP_NUMBER,
    STEP_TIME_MS,
    TIME,
)
from workbench.measure.ratios import paired_speed_ratio
from workbench.quick import scaled
from workbench.ui.dashboard import LiveDashboard  # imported before any timing: plotly and ipywidgets
from .results import recorded

GOAL = 0.05  # at most this fraction fewer samples/s while the dashboard watches


def one_run(cfg: RunConfig, watched: bool) -> dict:
    """Start the worker, optionally watch it live, wait; the worker measures its own samples/s."""
    cpu0, wall0 = time.process_time(), time.monotonic()
    handle = start_run(cfg)
    dash = None
    if watched:
        dash = LiveDashboard(
            handle.run_dir, world_size=cfg.distributed.world_size, total_steps=cfg.run.steps
        ).start()
    try:
        handle.wait(timeout=1800)
    finally:
        if handle.running():
            handle.stop()
    if dash is not None:
        dash.wait(30)
        dash.stop()
    summary = handle.summary()
    if summary.get("status") != "completed":
        raise RuntimeError(
            f"benchmark run {handle.run_dir} ended {summary.get('status')!r}: {handle.log_tail(500)}"
        )
    wall = time.monotonic() - wall0
    return {
        SAMPLES_PER_S: summary[SAMPLES_PER_S],
        "wall_s": wall,
        "cpu_ms_per_s": (time.process_time() - cpu0) * 1e3 / wall,
        "redraws": dash.redraws if dash else 0,
    }


def redraw_cost(lengths=(1_000, 1_000_000), rounds: int = 7) -> dict[int, float]:
    """Milliseconds of one full redraw after `n` steps (median of interleaved rounds)."""
    from workbench.trials.calls import timed_calls
    from workbench.ui.charts import LiveCharts
    from workbench.ui.series import RunSeries

    charts = {}
    for n in lengths:
        series = RunSeries()
        for start in range(1, n + 1, 10_000):  # the tailer feeds batches, not one record at a time
            series.feed(
                [
                    {
                        EVENT: STEP,
                        TIME: i * 0.01,
                        RANK: 0,
                        ATTEMPT: 0,
                        STEP_NUMBER: i,
                        LOSS: 2.0 / i,
                        STEP_TIME_MS: 10.0,
                        DATA_WAIT_MS: 1.0,
                        SAMPLES_PER_S: 100.0 + (i % 7),
                        **({RSS_GIB: 0.5} if i % 50 == 1 else {}),
                    }
                    for i in range(start, min(start + 10_000, n + 1))
                ]
            )
        charts[n] = (LiveCharts(), series)
    times = timed_calls(
        {n: (lambda c=c, s=s: c.redraw(s)) for n, (c, s) in charts.items()}, warmup=1, rounds=rounds
    )
    return {n: t.median_ms for n, t in times.items()}


@recorded("dashboard", "Does watching a run slow it down, and does drawing stay cheap?")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.dashboard",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=scaled(6, 1),
        help="A-B pairs (default 6, the fewest that carry a 95 %% interval)",
    )
    parser.add_argument("--steps", type=int, default=scaled(300, 40), help="steps per run")
    parser.add_argument(
        "--long-run",
        type=int,
        default=scaled(1_000_000, 20_000),
        help="steps of the long history whose redraw is timed",
    )
    args = parser.parse_args(argv)
    cfg = RunConfig.default().replace(
        **{
            "run.steps": args.steps,
            "run.label": "bench-dashboard",
            "run.save_weights": False,
            "run.eval_batches": 0,
        }
    )
    print(
        f"default config ({cfg.model.name} width {cfg.model.width}, batch "
        f"{cfg.loader.batch_size}), {args.steps} steps, {args.rounds} rounds, A B B A order"
    )
    results: dict[bool, list[dict]] = {False: [], True: []}
    for i in range(args.rounds):
        for watched in order_of([False, True], i):
            r = one_run(cfg, watched)
            results[watched].append(r)
            print(
                f"  round {i + 1} {'dashboard' if watched else 'no dashboard':>12}: "
                f"{r[SAMPLES_PER_S]:>9,.0f} samples/s, {r['redraws']:>3} redraws in "
                f"{r['wall_s']:.1f} s, this process used {r['cpu_ms_per_s']:.0f} ms CPU/s",
                flush=True,
            )
    gain = paired_speed_ratio(
        [r[SAMPLES_PER_S] for r in results[False]], [r[SAMPLES_PER_S] for r in results[True]]
    )
    print(f"samples/s with the dashboard / without, per round: {gain.label()}")
    cpu = statistics.median(r["cpu_ms_per_s"] for r in results[True])
    print(
        f"the watching process used {cpu:.0f} ms of CPU per second of run (median; "
        f"{statistics.median(r['cpu_ms_per_s'] for r in results[False]):.0f} without the dashboard)"
    )
    if gain.low is None:
        decided = "not decided: too few rounds for an interval"
    elif gain.low >= 1 - GOAL:
        decided = "met: the whole interval is within it"
    elif gain.high < 1 - GOAL:
        decided = "not met: the whole interval is outside it"
    else:
        decided = "not decided: the interval straddles it"
    print(
        f"samples/s change with the dashboard: {(gain.ratio - 1) * 100:+.1f} % (goal: at most "
        f"{GOAL:.0%} fewer; {decided})"
    )
    cost = redraw_cost((1_000, args.long_run))
    short, long = cost[1_000], cost[args.long_run]
    print(
        f"one redraw of the live charts: {short:.1f} ms after 1,000 steps, {long:.1f} ms after "
        f"{args.long_run:,} steps: {long / short:.2f}x (goal <= 2x)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
