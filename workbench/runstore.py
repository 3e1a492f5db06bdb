"""The run store: one folder per run under `runs/` (run.runs_dir, or $WORKBENCH_RUNS), named by
time and a short label, holding the files workbench.runfolder names: the config, each rank's
events, the summary, the launch record and the trained weights.

Everything here reads from disk (through workbench.runfolder, which names a run folder's files), so
runs can be listed and compared after a kernel restart, and nothing here imports what a config
names. A run folder is claimed atomically when it is made (the
RUN_ID file, created with O_EXCL), and recorded as made here (workbench.provenance), the one fact
the trust rule (workbench.train.trust) stands on. A run that wrote
no final record is shown as running only while its processes live (launch.json names them).
"""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path

from .config import ConfigError, RunConfig, require_config
from .disk import disk_message, make_dirs, write_json_atomic  # noqa: F401 - write_json_atomic for callers
from .events import (
    ATTEMPT,
    CREATED_T,
    DONE,
    ENDS,
    EVENT,
    LOSS,
    MEM_PEAK_GIB,
    PID,
    RANK,
    RSS_GIB,
    SAMPLES_PER_S,
    START,
    STATUS,
    STEP,
    STEP_NUMBER,
    STEP_TIME_MS,
    TIME,
    read_events,
)
from .measure.ratios import unpaired_ratio
from .measure.warmup import warmup_steps
from .procs import same_process
from .provenance import record_created
from .runfolder import RunFolder, Summary, error_type_of, read_json


def runs_root(cfg: RunConfig | None = None) -> Path:
    env = os.environ.get("WORKBENCH_RUNS")
    if env:
        return Path(env)
    return Path(cfg.run.runs_dir if cfg else "runs")


def default_label(cfg: RunConfig) -> str:
    ranks = cfg.distributed.world_size
    label = cfg.run.label or f"{cfg.model.name.rsplit(':', 1)[-1]}-{cfg.precision.dtype}" + (
        f"-{ranks}r" if ranks > 1 else ""
    )
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-")[:60] or "run"


def create_run_dir(cfg: RunConfig, root: str | Path | None = None, *, path: str | Path | None = None) -> Path:
    """Make the run folder (a fresh one under `root`, or exactly `path`), claim it and write its
    config. The config is validated first, so a bad config leaves nothing behind; the claim is atomic,
    so of two starts in one folder (threads or processes) exactly one gets it and the other a
    ConfigError; a disk error is one line naming the path and leaves nothing half-made."""
    require_config(cfg)
    if path is not None:
        path = usable_run_dir(path)
        made = _claim(path)
    else:
        path, made = _fresh(Path(root) if root is not None else runs_root(cfg), cfg)
    folder = RunFolder(path)
    try:
        folder.write_config(cfg)
        record_created(path, cfg)
    except OSError as e:
        _unclaim(path, made)
        raise ConfigError(disk_message(folder.config_file, e, "writing the run's config")) from None
    return path


def _fresh(root: Path, cfg: RunConfig) -> tuple[Path, bool]:
    try:
        make_dirs(root)
    except OSError as e:
        raise ConfigError(disk_message(root, e, "making the run store")) from None
    if not root.is_dir():
        raise ConfigError(
            f"run store {str(root)!r} is a file, not a folder; set run.runs_dir "
            "(or $WORKBENCH_RUNS) to a folder"
        )
    base = f"{time.strftime('%Y%m%d-%H%M%S')}_{default_label(cfg)}"
    for n in range(1000):
        path = root / (base if n == 0 else f"{base}_{n}")
        try:
            path.mkdir(mode=0o755)  # atomic: of two starts, one makes it and the other tries the next name
        except FileExistsError:
            continue
        except OSError as e:
            raise ConfigError(disk_message(path, e, "making the run folder")) from None
        return path, _claim(path, made=True)
    raise ConfigError(f"could not make a fresh run folder under {str(root)!r}: 1000 names taken")


def usable_run_dir(path: str | Path) -> Path:
    """The folder a user named for a run, absolute (a name starting with a dash then never reads as
    an option on a supervisor's or a rank's command line), or a one-line refusal: '' (not taken as
    the current folder), a file, a folder that holds a run or other files. Asked before the
    pre-launch checks, and again by the claim, which is the atomic step."""
    if not str(path).strip():
        raise ConfigError("run dir is empty: name a new folder, or leave it out for a fresh one under runs/")
    path = Path(path).absolute()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"run dir {str(path)!r} is a file; choose a new folder")
    folder = RunFolder(path)
    if folder.config_file.exists():
        raise ConfigError(f"run dir {str(path)!r} already holds a run; choose a new folder")
    if path.is_dir() and not folder.run_id_file.exists():  # a claim writes its id before all else
        others = sorted(p.name for p in path.iterdir())
        if folder.run_id_file.name in others:  # another start claimed it since the look above
            raise ConfigError(
                f"run dir {str(path)!r} already holds a run (or another start claimed "
                "it at the same moment); choose a new folder"
            )
        if others:
            more = f" and {len(others) - 1} more" if len(others) > 1 else ""
            raise ConfigError(
                f"run dir {str(path)!r} is not empty (it holds {others[0]!r}{more}): "
                "a run needs a new or empty folder"
            )
    return path


def _claim(path: Path, made: bool = False) -> bool:
    """Create RUN_ID in `path` with O_EXCL, the one atomic step of a claim. Returns whether this
    call made the folder, so a start that fails later removes exactly what it made."""
    if not made:
        try:
            make_dirs(path.parent).joinpath(path.name).mkdir(mode=0o755)
            made = True
        except FileExistsError:
            usable_run_dir(path)
        except OSError as e:
            raise ConfigError(disk_message(path, e, "making the run folder")) from None
    folder = RunFolder(path)
    try:
        fd = os.open(folder.run_id_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise ConfigError(
            f"run dir {str(path)!r} already holds a run (or another start claimed "
            "it at the same moment); choose a new folder"
        ) from None
    except OSError as e:
        _unclaim(path, made)
        raise ConfigError(disk_message(path, e, "claiming the run folder")) from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(16))
    except OSError as e:
        _unclaim(path, made)
        raise ConfigError(disk_message(folder.run_id_file, e, "claiming the run folder")) from None
    return made


def _unclaim(path: Path, made: bool) -> None:
    """Undo a claim that could not be completed: nothing half-made stays behind."""
    folder = RunFolder(path)
    for file in (folder.config_file, folder.run_id_file):
        try:
            file.unlink()
        except OSError:
            pass
    if made:
        try:
            path.rmdir()
        except OSError:
            pass


# --- reading ------------------------------------------------------------------------------------
def processes_alive(run_dir: str | Path) -> bool | None:
    """Whether any process of the run still lives: its supervisor (launch.json) or a rank (the pids
    its `start` records hold; a tracked script's processes are its ranks), each checked against its
    start time so a reused pid does not count. None when the folder names no process (never
    launched, or made before pids were recorded)."""
    run_dir = Path(run_dir)
    procs = []
    try:
        info = RunFolder(run_dir).launch() or {}
    except ConfigError:
        info = {}
    if info.get("supervisor_pid"):
        procs.append((info["supervisor_pid"], info.get("supervisor_created")))
    if not procs and not RunFolder(run_dir).is_script():  # a tracked script has no supervisor
        return None
    procs += [
        (r[PID], r.get(CREATED_T)) for r in read_events(run_dir) if r.get(EVENT) == START and r.get(PID)
    ]
    return any(same_process(pid, created) for pid, created in procs) if procs else None


def removed_folder(run_dir: str | Path) -> Summary:
    """What is known of a run whose folder was removed: that, and nothing else."""
    return {
        "status": "failed",
        "cause": "folder_removed",
        "error_type": error_type_of("folder_removed"),
        "message": f"the run folder {str(run_dir)!r} was removed, with its config and events: "
        "its processes were stopped and nothing of the run can be read",
    }


def read_summary(run_dir: str | Path) -> Summary:
    """The run's summary.json, or one rebuilt from its events when the run never wrote it: still
    running while its processes live, else ended without a record (killed with its supervisor);
    or that its folder is gone."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return removed_folder(run_dir)
    summary = RunFolder(run_dir).summary()
    if summary is not None:
        return summary
    records = read_events(run_dir)
    steps = [r for r in records if r.get(EVENT) == STEP]
    ends = [r for r in records if r.get(EVENT) in ENDS]
    last = steps[-1][STEP_NUMBER] if steps else 0
    out = {"status": "running", "steps": last, "final_loss": steps[-1].get(LOSS) if steps else None}
    if ends:
        end = ends[-1]
        out["status"] = end.get(STATUS, "completed" if end[EVENT] == DONE else "failed")
    elif processes_alive(run_dir) is False:
        out.update(
            status="failed",
            cause="vanished",
            error_type=error_type_of("vanished"),
            message=f"ended without a record after step {last}: every process of the run is "
            + (
                "gone (killed with SIGKILL, which no process can record, or the machine restarted)"
                if RunFolder(run_dir).is_script()
                else "gone (killed together with its supervisor, or the machine restarted)"
            ),
        )
    elif not records:
        out["status"] = "empty"
    return out


def _config_of(run_dir: Path) -> dict:
    shape = RunFolder(run_dir).shape()
    return {k: shape[k] for k in ("model", "precision", "ranks", "batch_size")}


def list_runs(root: str | Path | None = None):
    """A pandas DataFrame, one row a run (newest last): folder, label, status and summary figures.
    A damaged folder does not break the listing: its row says status 'broken' and why."""
    import pandas as pd

    root = Path(root) if root is not None else runs_root()
    if root.exists() and not root.is_dir():
        raise ConfigError(
            f"run store {str(root)!r} is a file, not a folder of runs; give the folder "
            "that holds the run folders (default ./runs or $WORKBENCH_RUNS)"
        )
    rows = []
    for run_dir in sorted(p for p in root.glob("*") if RunFolder(p).holds_run()):
        row = {"run": run_dir.name, "path": str(run_dir)}
        try:
            row.update(_config_of(run_dir))
            summary = read_summary(run_dir)
            row.update({k: v for k, v in summary.items() if not isinstance(v, (dict, list))})
        except ConfigError as e:
            row.update(status="broken", problem=str(e))
        rows.append(row)
    return pd.DataFrame(rows)


def load_events(run_dirs, event: str = STEP):
    """Records of one kind from several runs in one DataFrame, with a `run` column."""
    import pandas as pd

    frames = []
    for run_dir in run_dirs:
        recs = [r for r in read_events(run_dir) if r.get(EVENT) == event]
        df = pd.DataFrame(recs)
        df.insert(0, "run", Path(run_dir).name)
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def run_to_first_step(run_dir: str | Path) -> dict:
    """From the launcher's start (launch.json) to rank 0's first step, and whether a warm worker
    took the run (and had warmed up by then) or why it started cold."""
    run_dir = Path(run_dir)
    launch = read_json(RunFolder(run_dir).launch_file)
    step = next((r for r in read_events(run_dir) if r.get(EVENT) == STEP and r.get(RANK) == 0), None)
    spare = launch.get("warm")
    return {
        "run": run_dir.name,
        "seconds": round(step[TIME] - launch["t"], 3) if step and "t" in launch else None,
        "warm_worker": spare is not None,
        "warmed_up_when_taken": spare.get("ready_when_taken") if spare else None,
        "cold_because": launch.get("cold_because"),
    }


def warm_start_text(hot: dict, cold: dict) -> str:
    """What two `run_to_first_step` rows say: whether the panel's spare took its run, and each
    run's seconds from Run to the first step (one run each: figures, not a comparison)."""
    if not hot["warm_worker"]:
        return (
            f"The spare did not take this run ({hot.get('cold_because') or 'no reason recorded'}): "
            f"both started cold, {hot['seconds']:.2f} s and {cold['seconds']:.2f} s from Run to the "
            "first step."
        )
    ready = "" if hot["warmed_up_when_taken"] else ", still warming up when it was taken,"
    return (
        f"The spare{ready} took the panel's run: {hot['seconds']:.2f} s from Run to the first step, "
        f"against {cold['seconds']:.2f} s for the cold start ({cold.get('cold_because')})."
    )


def load_config(run_dir: str | Path) -> RunConfig:
    return RunFolder(run_dir).config()


def time_per_sample_ms(run_dir: str | Path) -> list[float]:
    """Milliseconds per sample of the whole run at each step of the latest attempt (samples/s
    summed over ranks), after the warm-up the summary leaves out."""
    steps = [r for r in read_events(run_dir) if r.get(EVENT) == STEP and r.get(SAMPLES_PER_S)]
    last = max((int(r.get(ATTEMPT, 0)) for r in steps), default=0)
    total: dict[int, float] = {}
    for r in steps:
        if int(r.get(ATTEMPT, 0)) == last:
            total[r[STEP_NUMBER]] = total.get(r[STEP_NUMBER], 0.0) + r[SAMPLES_PER_S]
    times = [1e3 / total[k] for k in sorted(total)]
    return times[warmup_steps(len(times)) :]


def compare(run_dirs) -> "pd.DataFrame":  # noqa: F821
    """One row a run, the first as baseline: throughput speedup with its interval (a bootstrap over
    the runs' steps: separate runs, so say so), step time, threads, peak memory, final loss and
    accuracy, and what other programs did during each run. The table behind the notebooks'
    comparison view and `workbench compare`; `workbench ab` measures a comparison properly."""
    import pandas as pd

    rows, base_times = [], None
    for run_dir in run_dirs:
        run_dir = Path(run_dir)
        cfg = _config_of(run_dir)
        s = read_summary(run_dir)
        times = time_per_sample_ms(run_dir)
        base_times = times if base_times is None else base_times
        ratio = unpaired_ratio(base_times, times) if times and base_times else None
        c = s.get("contention") or {}
        rows.append(
            {
                "run": run_dir.name,
                "status": s.get("status"),
                "precision": cfg["precision"],
                "ranks": cfg["ranks"],
                "steps": s.get("steps"),
                "threads": s.get("threads"),
                SAMPLES_PER_S: s.get(SAMPLES_PER_S),
                "speedup": ratio.ratio if ratio else None,
                "speedup_low": ratio.low if ratio else None,
                "speedup_high": ratio.high if ratio else None,
                "verdict": (ratio.verdict if ratio else "not measured") if rows else "baseline",
                STEP_TIME_MS: s.get("step_time_ms_median"),
                "peak_mem_gib": s.get(MEM_PEAK_GIB, s.get(RSS_GIB)),
                "final_loss": s.get("final_loss"),
                "eval_accuracy": s.get("eval_accuracy"),
                "other_cpu_cores": c.get("other_cpu_cores"),
                "busy": c.get("busy"),
            }
        )
    df = pd.DataFrame(rows)
    if not df.empty:
        df.attrs["note"] = contention_note(rows)
    return df


def contention_note(rows: list[dict]) -> str:
    """What a reader of the comparison must know: it compares separate runs, and which of them ran
    on a busy machine."""
    note = (
        "separate runs, not interleaved: the interval covers step-to-step noise, not drift "
        "between the runs (`workbench ab` measures alternating runs)"
    )
    busy = [r["run"] for r in rows if r.get("busy")]
    if busy:
        note += (
            f"; another process held the cores during {len(busy)} of {len(rows)} runs "
            f"({', '.join(busy)}): the comparison is unreliable"
        )
    known = [r for r in rows if r.get("busy") is not None]
    if busy and len(busy) < len(known):
        note += "; the runs were taken under different contention"
    return note
