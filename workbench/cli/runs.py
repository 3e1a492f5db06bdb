"""`workbench runs`: list the runs in the run store, newest last."""
from __future__ import annotations

import json

from ..events import SAMPLES_PER_S

COLUMNS = ["run", "status", "model", "precision", "ranks", "steps", "final_loss", "eval_accuracy",
           SAMPLES_PER_S, "step_time_ms_median"]


def add_parser(sub):
    p = sub.add_parser("runs", help="list runs in the run store")
    p.add_argument("--dir", help="the run store (default: $WORKBENCH_RUNS or ./runs)")
    p.add_argument("--json", action="store_true")
    return p


def main(args) -> int:
    import sys

    from pathlib import Path

    from ..runfolder import RunFolder
    from ..runstore import list_runs, runs_root

    root = Path(args.dir or runs_root())
    if any(RunFolder(p).job() is not None for p in root.glob("*")):  # torch only for SLURM runs
        from ..distributed.jobs import reconcile

        reconcile(root)  # submitted jobs that ended unwatched: how they ended, from SLURM
    scripts = [p for p in root.glob("*") if RunFolder(p).is_script() and not RunFolder(p).final()]
    if scripts:
        from ..distributed.faults import settle_tracked

        for path in scripts:  # tracked scripts of several ranks: which rank was at fault
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
