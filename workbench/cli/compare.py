"""`workbench compare`: runs side by side, the first as baseline (speedup, step time, peak memory,
final loss, accuracy): the same table as the notebooks' comparison view.

    workbench compare runs/20260101-120000_mlp-fp32 runs/20260101-120200_mlp-bf16
    workbench compare runs/* --json
"""

from __future__ import annotations

import json
from pathlib import Path

from ..config import ConfigError
from ..runfolder import CONFIG, RunFolder


def add_parser(sub):
    p = sub.add_parser(
        "compare",
        help="compare runs side by side (the first is the baseline)",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders; the first is the baseline")
    p.add_argument("--json", action="store_true", help="print the table as a JSON list of rows")
    return p


def check_run_dirs(run_dirs) -> list[Path]:
    """Every argument must be a run folder (one holding config.json)."""
    paths = []
    for raw in run_dirs:
        path = Path(raw)
        if not path.exists():
            raise ConfigError(f"RUN_DIR {raw!r} does not exist; `workbench runs` lists the runs")
        if not path.is_dir() or not RunFolder(path).holds_run():
            raise ConfigError(
                f"RUN_DIR {raw!r} is not a run folder (no {CONFIG} inside); `workbench runs` lists the runs"
            )
        paths.append(path)
    return paths


def format_table(df) -> str:
    words = [c for c in df.columns if df[c].dtype == object]  # None in a column of words reads "-" too
    df = df.copy()
    df[words] = df[words].fillna("-")
    return df.to_string(index=False, float_format=lambda v: f"{v:.4g}", na_rep="-")


def main(args) -> int:
    from ..runstore import compare

    df = compare(check_run_dirs(args.run_dirs))
    if args.json:
        print(json.dumps(json.loads(df.to_json(orient="records")), indent=2))
    else:
        print(format_table(df))
        if df.attrs.get("note"):
            print(f"\nspeedup: samples/s vs the first run, with its 95 % interval; {df.attrs['note']}")
    return 0
