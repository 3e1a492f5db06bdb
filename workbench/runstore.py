"""The run store: one folder per run under `runs/` (run.runs_dir, or $WORKBENCH_RUNS), named by
time and a short label, holding config.json, rank*.jsonl, summary.json and the trained weights.

Everything here reads from disk, so runs can be listed and compared after a kernel restart.
"""
from __future__ import annotations

import json
import math
import os
import re
import time
from pathlib import Path

from .config import RunConfig
from .events import read_events

def runs_root(cfg: RunConfig | None = None) -> Path:
    env = os.environ.get("WORKBENCH_RUNS")
    if env:
        return Path(env)
    return Path(cfg.run.runs_dir if cfg else "runs")


def default_label(cfg: RunConfig) -> str:
    ranks = cfg.distributed.world_size
    label = cfg.run.label or f"{cfg.model.name.rsplit(':', 1)[-1]}-{cfg.precision.dtype}" + (
        f"-{ranks}r" if ranks > 1 else "")
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-")[:60] or "run"


def create_run_dir(cfg: RunConfig, root: str | Path | None = None) -> Path:
    """Make the run folder and write its config atomically. The config is validated first, so a bad
    config leaves nothing behind."""
    cfg.validate()
    root = Path(root) if root is not None else runs_root(cfg)
    root.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = f"{stamp}_{default_label(cfg)}"
    for n in range(1000):
        path = root / (base if n == 0 else f"{base}_{n}")
        try:
            path.mkdir()
            break
        except FileExistsError:
            continue
    else:
        raise RuntimeError(f"could not make a fresh run folder under {root}")
    cfg.save(path / "config.json")
    return path


def json_safe(value):
    """`value` with NaN and infinities as None: json.dumps would write them as NaN/Infinity,
    which is not JSON (a diverged run's final loss is NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(json_safe(data), indent=2, sort_keys=True, allow_nan=False))
    tmp.replace(path)


def read_summary(run_dir: str | Path) -> dict:
    """The run's summary.json, or one rebuilt from its events when the run never wrote it
    (killed, still going)."""
    run_dir = Path(run_dir)
    path = run_dir / "summary.json"
    if path.is_file():
        return json.loads(path.read_text())
    records = read_events(run_dir)
    steps = [r for r in records if r.get("event") == "step"]
    ends = [r for r in records if r.get("event") in ("done", "error")]
    status = "running"
    if ends:
        last = ends[-1]
        status = last.get("status", "completed" if last["event"] == "done" else "failed")
    elif not records:
        status = "empty"
    return {"status": status, "steps": steps[-1]["step"] if steps else 0,
            "final_loss": steps[-1].get("loss") if steps else None}


def list_runs(root: str | Path | None = None):
    """A pandas DataFrame, one row a run (newest last): folder, label, status and summary figures."""
    import pandas as pd

    root = Path(root) if root is not None else runs_root()
    rows = []
    for run_dir in sorted(p for p in root.glob("*") if (p / "config.json").is_file()):
        cfg = json.loads((run_dir / "config.json").read_text())
        row = {"run": run_dir.name, "path": str(run_dir), "model": cfg["model"]["name"],
               "precision": cfg["precision"]["dtype"], "ranks": cfg["distributed"]["nproc"] *
               cfg["distributed"]["nnodes"], "batch_size": cfg["loader"]["batch_size"]}
        summary = read_summary(run_dir)
        row.update({k: v for k, v in summary.items() if not isinstance(v, (dict, list))})
        rows.append(row)
    return pd.DataFrame(rows)


def load_events(run_dirs, event: str = "step"):
    """Records of one kind from several runs in one DataFrame, with a `run` column."""
    import pandas as pd

    frames = []
    for run_dir in run_dirs:
        recs = [r for r in read_events(run_dir) if r.get("event") == event]
        df = pd.DataFrame(recs)
        df.insert(0, "run", Path(run_dir).name)
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_config(run_dir: str | Path) -> RunConfig:
    return RunConfig.load(Path(run_dir) / "config.json")


def compare(run_dirs) -> "pd.DataFrame":  # noqa: F821
    """One row a run, the first as baseline: throughput speedup, step time, peak memory, final
    loss and accuracy. The table behind the notebooks' comparison view and `workbench compare`."""
    import pandas as pd

    rows = []
    for run_dir in run_dirs:
        run_dir = Path(run_dir)
        cfg = json.loads((run_dir / "config.json").read_text())
        s = read_summary(run_dir)
        peak = s.get("mem_peak_gib", s.get("rss_gib"))
        rows.append({"run": run_dir.name, "status": s.get("status"),
                     "precision": cfg["precision"]["dtype"],
                     "ranks": cfg["distributed"]["nproc"] * cfg["distributed"]["nnodes"],
                     "samples_per_s": s.get("samples_per_s"),
                     "step_time_ms": s.get("step_time_ms_median"),
                     "peak_mem_gib": peak, "final_loss": s.get("final_loss"),
                     "eval_accuracy": s.get("eval_accuracy")})
    df = pd.DataFrame(rows)
    if not df.empty:
        base = df["samples_per_s"].iloc[0]
        df.insert(5, "speedup", (df["samples_per_s"] / base).round(3) if base else None)
    return df
