"""`workbench runs`: list the runs in the run store, newest last; `workbench runs export` sends
runs to TensorBoard or MLflow.

    workbench runs
    workbench runs export runs/20261205-101500_train --to tensorboard tb/
    workbench runs export runs/* --to mlflow sqlite:///mlflow.db      (or a folder: a file store)
"""

from __future__ import annotations

import json

from ..events import SAMPLES_PER_S

COLUMNS = [
    "run",
    "status",
    "model",
    "precision",
    "ranks",
    "steps",
    "final_loss",
    "eval_accuracy",
    SAMPLES_PER_S,
    "step_time_ms_median",
]


def add_parser(sub):
    p = sub.add_parser(
        "runs",
        help="list runs in the run store; `runs export` sends them to TensorBoard or MLflow",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--dir", help="the run store (default: $WORKBENCH_RUNS or ./runs)")
    p.add_argument("--json", action="store_true")
    actions = p.add_subparsers(dest="action", metavar="export")
    e = actions.add_parser("export", help="send runs to TensorBoard or MLflow")
    e.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    e.add_argument(
        "--to",
        nargs=2,
        required=True,
        metavar=("KIND", "TARGET"),
        help="tensorboard LOG_DIR | mlflow URI (sqlite:///mlflow.db, or a folder)",
    )
    return p


def export(args) -> int:
    import logging

    from ..sinks import export_run, sink_for

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # its database set-up notes, not ours
    from .compare import check_run_dirs

    kind, target = args.to
    sink_for(kind, target)  # the target checked (a malformed URI, a server that does not answer) first
    for run_dir in check_run_dirs(args.run_dirs):
        sink = sink_for(kind, target, run_dir.name)
        steps = export_run(run_dir, sink)
        where = f"run {sink.run_id}" if getattr(sink, "run_id", None) else target
        left = (
            f"; {len(steps.skipped)} damaged event line(s) left out: {steps.skipped[0]}"
            if steps.skipped
            else ""
        )
        print(f"{run_dir.name}: {steps} steps -> {kind} {where}{left}")
    return 0


def main(args) -> int:
    import sys

    if args.action == "export":
        return export(args)

    from pathlib import Path

    from ..runfolder import RunFolder
    from ..runstore import list_runs, runs_root

    root = Path(args.dir or runs_root())
    if any(RunFolder(p).job() is not None for p in root.glob("*")):  # torch only for SLURM runs
        from ..distributed.jobs import reconcile

        reconcile(root)  # submitted jobs that ended unwatched: how they ended, from SLURM
    from ..distributed.faults import settle_tracked  # stdlib only: no torch

    for path in root.glob("*"):  # tracked scripts of several ranks that ended: the rank at fault
        settle_tracked(path)
    df = list_runs(args.dir)
    if args.json:
        print(json.dumps(json.loads(df.to_json(orient="records")), indent=2))
        return 0
    if df.empty:
        print(f"no runs yet in {args.dir or runs_root()}")
        return 0
    broken = df[df["status"] == "broken"] if "problem" in df.columns else df.iloc[0:0]
    good = df.drop(broken.index)
    if not good.empty:
        shown = good[[c for c in COLUMNS if c in good.columns]].astype(object)
        print(shown.where(shown.notna(), "-").to_string(index=False))
    for _, row in broken.iterrows():  # listed, not fatal: one damaged folder hides nothing else
        print(f"workbench runs: skipped {row['run']}: {row['problem']}", file=sys.stderr)
    return 0
