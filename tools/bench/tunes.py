"""The tune of each example model, quiet or beside two busy processes, and what it decided:

    python -m tools.bench tunes [--budget-min 10] [--busy] [--out FILE]

For the digits MLP (the default config), the residual CNN of examples/resnet.py (width 16, digits)
and GPT-2 built from a config (examples/gpt2.py, text): how many of the settings this machine can
run the tune decided (kept, dropped, or undecided after its pairs) and how many it left not measured
(and why), then a separate A/B of each setting it kept, against the baseline. The table, this
machine's report and the date go to the results file.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
from pathlib import Path

from workbench.config import RunConfig
from workbench.procs import OtherWork
from .results import bench_command, machine_line, results_file, write_results

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def examples() -> dict[str, RunConfig]:
    base = RunConfig.default().replace(**{"run.device": "cpu"})
    return {
        "digits MLP": base,
        "residual CNN (examples/resnet.py)": base.replace(
            **{"model.name": f"{EXAMPLES / 'resnet.py'}:build", "model.kwargs": {"width": 16}}
        ),
        "GPT-2 from a config (examples/gpt2.py)": base.replace(
            **{"model.name": f"{EXAMPLES / 'gpt2.py'}:build", "data.name": "text"}
        ),
    }


def one(name: str, cfg: RunConfig, budget_s: float) -> list[str]:
    from workbench.trials.config_ab import ab_test
    from workbench.tune.tuner import tune

    report = tune(cfg, budget_s=budget_s)
    reachable = [
        d
        for d in report.decisions
        if not d.outcome.startswith(
            (
                "not measured: this machine cannot run it",
                "not measured: the launch refuses it with",
                "not measured: this model has no blocks",
            )
        )
        and d.outcome != "already part of the best config"
    ]
    decided = [d for d in reachable if d.rounds]
    share = len(decided) / len(reachable) if reachable else 1.0
    lines = [
        f"| {name} | {len(decided)} of {len(reachable)} ({share:.0%}) | "
        f"{', '.join(f'{d.setting} {d.status}' for d in report.decisions)} | "
        f"{report.spent_s:.0f} s of {budget_s:.0f} s |"
    ]
    if report.settings:
        check = ab_test(cfg, report.config, labels=("baseline", "tuned"), rounds=12)
        lines.append(
            f"| {name}: the tuned config against the baseline, a separate A/B | | "
            f"{check.comparison.text()} | |"
        )
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tools.bench tunes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--budget-min", type=float, default=10.0, help="minutes a tune (default 10)")
    p.add_argument("--busy", action="store_true", help="beside two busy processes")
    p.add_argument("--only", nargs="+", help="examples whose name starts so")
    p.add_argument("--out", help="the results file (default: docs/results/<machine>/tunes-*.md)")
    args = p.parse_args(argv)
    condition = "beside two busy processes" if args.busy else "quiet"
    out = args.out or results_file(f"tunes-{'busy' if args.busy else 'quiet'}")
    rows = [
        "| example | settings decided of those this machine can run | each setting | time |",
        "|---|---|---|---|",
    ]
    chosen = {k: v for k, v in examples().items() if not args.only or any(k.startswith(o) for o in args.only)}
    with OtherWork(2) if args.busy else contextlib.nullcontext():
        for name, cfg in chosen.items():
            rows += one(name, cfg, 60 * args.budget_min)
            print(rows[-1], flush=True)
    write_results(
        [
            f"# Tunes of the example models, {condition} ({datetime.date.today().isoformat()})",
            "",
            f"Machine: {machine_line()}; {args.budget_min:g} minutes a tune.",
            "",
            *rows,
        ],
        out,
        bench_command("tunes", argv),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
