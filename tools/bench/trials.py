"""What the trial engine costs and whether it is honest, quiet and beside two busy processes:

    python -m tools.bench trials [--rounds 12] [--out FILE]

For each comparison (an A/A, bf16 against fp32, fused against foreach, channels_last on the
residual CNN of examples/resnet.py, dynamic int8 on a 3x1024 MLP at batch 64), quiet and then beside
two busy processes in sessions of their own (procs.OtherWork): the ratio with its interval, the
pairs used and dropped, the conditions and the verdict; the cost of the comparison over the seconds
its slices measured (starting the host process and building the variants included, the goal at
most 1.25 once built), and decisions a minute. The table, this machine's report and the date go to
the results file: prose elsewhere reads it, never re-types it.

Quiet, each training comparison is also measured the way comparisons were made before the engine:
whole runs of each side, one process start each, in alternating rounds (tools/rounds.py);
the engine's ratio should agree with it within their intervals.
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path

from workbench.config import RunConfig
from workbench.procs import OtherWork
from .results import bench_command, machine_line, results_file, write_results
from workbench.trials.engine import Trial
from workbench.trials.hosts import TrainingHosts

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def training_pairs() -> dict[str, tuple[RunConfig, RunConfig]]:
    base = RunConfig.default().replace(**{"run.device": "cpu"})
    resnet = base.replace(
        **{
            "model.name": f"{EXAMPLES / 'resnet.py'}:build",
            "data.name": "synthetic_images",
            "data.image_size": 32,
            "loader.batch_size": 32,
        }
    )
    return {
        "A/A (default MLP)": (base, base),
        "bf16 vs fp32 (default MLP)": (base, base.replace(**{"precision.dtype": "bf16"})),
        "fused vs foreach (default MLP)": (
            base.replace(**{"optim.impl": "foreach"}),
            base.replace(**{"optim.impl": "fused"}),
        ),
        "channels_last (residual CNN)": (resnet, resnet.replace(**{"precision.channels_last": True})),
    }


def one_training(a: RunConfig, b: RunConfig, rounds: int) -> dict:
    t0 = time.monotonic()
    with TrainingHosts(a) as hosts:
        hosts.add("a", a)
        hosts.add("b", b)
        built = time.monotonic()
        trial = Trial(hosts.of(["a", "b"]), "a").run(rounds)
        done = time.monotonic()
    measured = sum(s.wall_s for v in trial.slices.values() for s in v)
    return {
        "comparison": trial.compare("b"),
        "cost_built": (done - built) / measured,
        "cost_all": (done - t0) / measured,
        "seconds": done - t0,
    }


def cross_process(a: RunConfig, b: RunConfig, rounds: int, run_s: float) -> dict:
    """The same comparison as whole runs in separate processes, `run_s` seconds of steps each."""
    from workbench.measure.ratios import paired_speed_ratio
    from workbench.events import SAMPLES_PER_S
    from tools.rounds import run_rounds

    sized = {"run.steps": 1_000_000, "run.time_budget_s": run_s}
    t0 = time.monotonic()
    runs = run_rounds({"a": a.replace(**sized), "b": b.replace(**sized)}, rounds)
    ratio = paired_speed_ratio([s[SAMPLES_PER_S] for s in runs["a"]], [s[SAMPLES_PER_S] for s in runs["b"]])
    return {"ratio": ratio, "seconds": time.monotonic() - t0}


def one_int8(rounds: int) -> dict:
    import torch

    from workbench.compress.quantize import quantize
    from workbench.compress.stats import SLICE_S, num_threads
    from workbench.trials.calls import LocalHost

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(
        *[m for _ in range(3) for m in (torch.nn.Linear(1024, 1024), torch.nn.ReLU())]
    ).eval()
    q, _ = quantize(mlp, "dynamic_int8")
    x = torch.randn(64, 1024)
    t0 = time.monotonic()
    with num_threads(1), torch.inference_mode():
        calls = LocalHost({"fp32": lambda: mlp(x), "int8": lambda: q(x)}, work=64)
        trial = Trial({"fp32": calls, "int8": calls}, slice_s=SLICE_S).run(rounds)
    done = time.monotonic()
    measured = sum(s.wall_s for v in trial.slices.values() for s in v)
    return {
        "comparison": trial.compare("int8"),
        "cost_built": (done - t0) / measured,
        "cost_all": (done - t0) / measured,
        "seconds": done - t0,
    }


def condition(rounds: int, cross: int = 0, run_s: float = 2.0) -> dict:
    out = {}
    for name, (a, b) in training_pairs().items():
        out[name] = one_training(a, b, rounds)
        if cross:
            out[name]["cross"] = cross_process(a, b, cross, run_s)
    out["dynamic int8 (3x1024 MLP, batch 64)"] = one_int8(rounds)
    return out


def agrees(engine, cross) -> bool:
    """Whether two intervals of the same ratio overlap (each its own 95 % interval)."""
    if engine.low is None or cross.low is None:
        return False
    return engine.low <= cross.high and cross.low <= engine.high


def table(results: dict) -> list[str]:
    lines = [
        "| comparison | condition | ratio [95 % interval], pairs, conditions: verdict | "
        "cost / measured (built) | cost / measured (all) |",
        "|---|---|---|---|---|",
    ]
    for cond, rows in results.items():
        for name, r in rows.items():
            lines.append(
                f"| {name} | {cond} | {r['comparison'].text()} | {r['cost_built']:.2f} | "
                f"{r['cost_all']:.2f} |"
            )
    return lines


def cross_table(quiet: dict) -> list[str]:
    rows = {k: r for k, r in quiet.items() if "cross" in r}
    if not rows:
        return []
    lines = [
        "| comparison, quiet | trial engine | whole runs, a process each | agree | "
        "seconds (engine / whole runs) |",
        "|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        e, c = r["comparison"].ratio, r["cross"]["ratio"]
        lines.append(
            f"| {name} | {r['comparison'].text()} | {c.label()} | "
            f"{'yes' if agrees(e, c) else 'no'} | {r['seconds']:.0f} / "
            f"{r['cross']['seconds']:.0f} |"
        )
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tools.bench trials",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rounds", type=int, default=12, help="pairs of slices a comparison")
    p.add_argument(
        "--cross-rounds",
        type=int,
        default=6,
        help="rounds of whole runs in separate processes, quiet (0: none)",
    )
    p.add_argument("--out", default=str(results_file("trials")), help="the results file")
    args = p.parse_args(argv)
    results = {"quiet": condition(args.rounds, args.cross_rounds)}
    with OtherWork(2):
        results["two busy processes"] = condition(args.rounds)
    quiet, busy = results["quiet"], results["two busy processes"]
    agree = sum(quiet[k]["comparison"].verdict == busy[k]["comparison"].verdict for k in quiet)
    seconds = sum(r["seconds"] for rows in results.values() for r in rows.values())
    decisions = sum(len(rows) for rows in results.values())
    lines = [
        f"# Trial engine: cost and honesty ({datetime.date.today().isoformat()})",
        "",
        f"Machine: {machine_line()}; {args.rounds} pairs of slices a comparison.",
        "",
        *table(results),
        "",
        *cross_table(results["quiet"]),
        "",
        f"Verdicts busy that agree with quiet: {agree} of {len(quiet)}.",
        f"Decisions a minute, process starts and builds included: "
        f"{decisions / (seconds / 60):.1f} ({decisions} in {seconds:.0f} s).",
    ]
    write_results(lines, args.out, bench_command("trials", argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
