"""`workbench runs`: list the runs in the run store, newest last."""
from __future__ import annotations

import json

COLUMNS = ["run", "status", "model", "precision", "ranks", "steps", "final_loss", "eval_accuracy",
           "samples_per_s", "step_time_ms_median"]


def add_parser(sub):
    p = sub.add_parser("runs", help="list runs in the run store")
    p.add_argument("--dir", help="the run store (default: $WORKBENCH_RUNS or ./runs)")
    p.add_argument("--json", action="store_true")
    return p


def main(args) -> int:
    from ..runstore import list_runs

    df = list_runs(args.dir)
    if args.json:
        print(json.dumps(json.loads(df.to_json(orient="records")), indent=2))
    elif df.empty:
        print("no runs yet")
    else:
        print(df[[c for c in COLUMNS if c in df.columns]].to_string(index=False))
    return 0
