"""The C library's malloc against tcmalloc (run.allocator), for speed and for the peak memory each
rank predicts:

    python -m tools.bench allocator [--rounds 12] [--out FILE]

Speed: each model trained under both allocators in the trial engine, quiet and then beside two
busy processes in sessions of their own (procs.OtherWork): a warm host process for each allocator
(LD_PRELOAD is read when a process starts), slices alternating between them, tcmalloc over the
system's as the median ratio of samples/s with its 95 % interval and verdict. The models: the
default MLP and the default transformer in one process, and two FSDP ranks of the transformer at
batch 16 and of the width-2048 MLP.

Memory: whole runs of DDP and FSDP on 2 ranks of the transformer at batch 16 and of the width-2048
MLP under each allocator, quiet, 30 steps each; each rank's peak resident set against the peak it
predicted once set up (workbench.train.sharding), the largest rank shown.
"""

from __future__ import annotations

import argparse
import datetime

from workbench.config import RunConfig
from workbench.distributed.launch import run
from workbench.machine.allocator import tcmalloc_path
from workbench.procs import OtherWork
from workbench.profile.presets import default_transformer
from workbench.trials.engine import Trial
from workbench.trials.hosts import TrainingHosts
from workbench.train.sharding import PEAK_TOLERANCE
from .results import bench_command, machine_line, results_file, write_results

MIB = 2**20


def models() -> dict[str, RunConfig]:
    mlp = RunConfig.default().replace(**{"run.device": "cpu"})
    transformer = default_transformer().replace(**{"run.device": "cpu"})
    two = {"distributed.nproc": 2, "distributed.strategy": "fsdp"}
    return {
        "default MLP, 1 process": mlp,
        "default transformer, 1 process": transformer,
        "transformer batch 16, 2 FSDP ranks": transformer.replace(**{**two, "loader.batch_size": 16}),
        "MLP width 2048, 2 FSDP ranks": mlp.replace(**{**two, "model.width": 2048}),
    }


def speed(rounds: int) -> dict:
    out = {}
    for name, cfg in models().items():
        system = cfg.replace(**{"run.allocator": "system"})
        with TrainingHosts(system) as hosts:
            hosts.add("system", system)
            hosts.add("tcmalloc", cfg.replace(**{"run.allocator": "tcmalloc"}))
            trial = Trial(hosts.of(["system", "tcmalloc"]), "system").run(rounds)
        out[name] = trial.compare("tcmalloc")
        print(f"  {name}: {out[name].text()}", flush=True)
    return out


def memory(steps: int) -> list[dict]:
    mlp = RunConfig.default().replace(**{"model.width": 2048})
    transformer = default_transformer().replace(**{"loader.batch_size": 16})
    rows = []
    for model, cfg in (("transformer batch 16", transformer), ("MLP width 2048", mlp)):
        for strategy in ("ddp", "fsdp"):
            for alloc in ("system", "tcmalloc"):
                c = cfg.replace(
                    **{
                        "distributed.nproc": 2,
                        "distributed.strategy": strategy,
                        "run.allocator": alloc,
                        "run.steps": steps,
                        "run.eval_batches": 0,
                        "run.save_weights": False,
                        "run.warm_worker": False,
                        "run.oversubscribe": True,
                    }
                )
                s = run(c, timeout_s=600)
                m = s["memory_per_rank"]
                rank = max(range(len(m["measured"])), key=lambda i: m["measured"][i]["peak"])
                predicted, measured = m["predicted"][rank]["peak"], m["measured"][rank]["peak"]
                rows.append(
                    {
                        "model": model,
                        "strategy": strategy.upper(),
                        "allocator": s["allocator"],
                        # None under the C library's malloc: its peak is not predicted
                        "predicted_mib": None if predicted is None else predicted / MIB,
                        "measured_mib": measured / MIB,
                        "ratio": None if predicted is None else predicted / measured,
                        "samples_per_s": s["samples_per_s"],
                    }
                )
                print(f"  {model}, {strategy}, {alloc}: {rows[-1]}", flush=True)
    return rows


def memory_table(rows: list[dict]) -> list[str]:
    lines = [
        "| model | strategy | allocator | predicted peak (MiB) | measured peak (MiB) | "
        f"predicted / measured | within {PEAK_TOLERANCE:.0%} |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["predicted_mib"] is None:
            lines.append(
                f"| {r['model']} | {r['strategy']} | {r['allocator']} | not predicted | "
                f"{r['measured_mib']:.0f} | - | - |"
            )
            continue
        within = abs(r["measured_mib"] - r["predicted_mib"]) <= PEAK_TOLERANCE * r["measured_mib"]
        lines.append(
            f"| {r['model']} | {r['strategy']} | {r['allocator']} | {r['predicted_mib']:.0f} | "
            f"{r['measured_mib']:.0f} | {r['ratio']:.2f} | {'yes' if within else 'no'} |"
        )
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tools.bench allocator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rounds", type=int, default=12, help="pairs of slices a comparison")
    p.add_argument("--steps", type=int, default=30, help="steps of each memory run")
    p.add_argument("--out", default=str(results_file("allocator")), help="the results file")
    args = p.parse_args(argv)
    if not tcmalloc_path():
        print("tcmalloc is not installed here (apt install libtcmalloc-minimal4): nothing to compare")
        return 1
    print("memory, quiet:", flush=True)
    rows = memory(args.steps)
    print("speed, quiet:", flush=True)
    results = {"quiet": speed(args.rounds)}
    print("speed, two busy processes:", flush=True)
    with OtherWork(2):
        results["two busy processes"] = speed(args.rounds)
    lines = [
        f"# Memory allocator: the C library's malloc against tcmalloc ({datetime.date.today().isoformat()})",
        "",
        f"Machine: {machine_line()}; tcmalloc from {tcmalloc_path()}.",
        "",
        f"Peak memory per rank, quiet, {args.steps} steps a run, 2 ranks, the rank with the larger peak:",
        "",
        *memory_table(rows),
        "",
        f"Speed, tcmalloc over the system's malloc, {args.rounds} pairs of slices a comparison:",
        "",
        "| model | condition | ratio [95 % interval], pairs, conditions: verdict |",
        "|---|---|---|",
        *[
            f"| {name} | {cond} | {c.text()} |"
            for cond, rows_ in results.items()
            for name, c in rows_.items()
        ],
    ]
    data = {
        "memory": rows,
        "speed": {cond: {n: c.as_dict() for n, c in r.items()} for cond, r in results.items()},
    }
    write_results(lines, args.out, bench_command("allocator", argv), data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
