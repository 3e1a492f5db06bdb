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
from .measure.compare import unpaired_ratio

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


def time_per_sample_ms(run_dir: str | Path) -> list[float]:
    """Milliseconds per sample of the whole run at each step of the latest attempt (samples/s
    summed over ranks), after the warm-up the summary leaves out."""
    steps = [r for r in read_events(run_dir) if r.get("event") == "step" and r.get("samples_per_s")]
    last = max((int(r.get("attempt", 0)) for r in steps), default=0)
    total: dict[int, float] = {}
    for r in steps:
        if int(r.get("attempt", 0)) == last:
            total[r["step"]] = total.get(r["step"], 0.0) + r["samples_per_s"]
    times = [1e3 / total[k] for k in sorted(total)]
    return times[min(len(times) // 5, 10):]


def compare(run_dirs) -> "pd.DataFrame":  # noqa: F821
    """One row a run, the first as baseline: throughput speedup with its interval (a bootstrap over
    the runs' steps: separate runs, so say so), step time, threads, peak memory, final loss and
    accuracy, and what other programs did during each run. The table behind the notebooks'
    comparison view and `workbench compare`; `workbench ab` measures a comparison properly."""
    import pandas as pd

    rows, base_times = [], None
    for run_dir in run_dirs:
        run_dir = Path(run_dir)
        cfg = json.loads((run_dir / "config.json").read_text())
        s = read_summary(run_dir)
        d = cfg["distributed"]
        world = d["nproc"] * d["nnodes"]
        times = time_per_sample_ms(run_dir)
        base_times = times if base_times is None else base_times
        ratio = unpaired_ratio(base_times, times) if times and base_times else None
        c = s.get("contention") or {}
        rows.append({"run": run_dir.name, "status": s.get("status"),
                     "precision": cfg["precision"]["dtype"], "ranks": world,
                     "threads": s.get("threads"), "samples_per_s": s.get("samples_per_s"),
                     "speedup": ratio.ratio if ratio else None,
                     "speedup_low": ratio.low if ratio else None,
                     "speedup_high": ratio.high if ratio else None,
                     "verdict": (ratio.verdict if ratio and rows else None),
                     "step_time_ms": s.get("step_time_ms_median"),
                     "peak_mem_gib": s.get("mem_peak_gib", s.get("rss_gib")),
                     "final_loss": s.get("final_loss"), "eval_accuracy": s.get("eval_accuracy"),
                     "other_cpu_cores": c.get("other_cpu_cores"), "busy": c.get("busy")})
    df = pd.DataFrame(rows)
    if not df.empty:
        df.attrs["note"] = contention_note(rows)
    return df


def contention_note(rows: list[dict]) -> str:
    """What a reader of the comparison must know: it compares separate runs, and which of them ran
    on a busy machine."""
    note = ("separate runs, not interleaved: the interval covers step-to-step noise, not drift "
            "between the runs (`workbench ab` measures alternating runs)")
    busy = [r["run"] for r in rows if r.get("busy")]
    if busy:
        note += (f"; another process held the cores during {len(busy)} of {len(rows)} runs "
                 f"({', '.join(busy)}): the comparison is unreliable")
    known = [r for r in rows if r.get("busy") is not None]
    if busy and len(busy) < len(known):
        note += "; the runs were taken under different contention"
    return note
