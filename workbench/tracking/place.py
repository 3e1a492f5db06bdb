"""Where a tracked script's run goes, and claiming it: every rank of one launch must find the same
folder without talking to the others.

The folder is `run_dir` when the script names one, else $WORKBENCH_RUN_DIR (what `workbench ab
--cmd` and the run panel set for a script they start), else a fresh folder in the run store. Under
torchrun on one node the ranks derive the same fresh name from their launch (torchrun's run id, or
their agent's process and its start time); across nodes they cannot, so a multi-node launch must
name its folder. Rank 0 claims the folder (its RUN_ID, made with O_EXCL) and writes the script's
record; the other ranks only add their events files.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path

from ..config import ConfigError
from ..disk import disk_message, make_dirs
from ..runfolder import RunFolder
from ..runstore import runs_root, usable_run_dir

RUN_DIR_ENV = "WORKBENCH_RUN_DIR"  # the folder a launcher chose for the script it starts


def label_of(label: str | None, argv: list[str]) -> str:
    """A folder-safe label: the one given, else the script's file name ('train' for train.py)."""
    raw = label or (Path(argv[0]).stem if argv and argv[0] not in ("", "-c") else "script")
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", raw).strip("-")[:60] or "script"


def launch_key(environ=os.environ) -> str | None:
    """What every rank of one torchrun launch on this node shares: torchrun's run id when it has
    one, else the agent process (the ranks' parent) and its start time. None for a lone process."""
    if int(environ.get("WORLD_SIZE", 1)) <= 1:
        return None
    run_id = environ.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":
        return run_id[:12]
    from ..procs import created_time

    parent = os.getppid()
    return f"{parent}-{int(created_time(parent) or 0)}"


def choose(run_dir: str | os.PathLike | None, label: str, environ=os.environ) -> tuple[Path, bool]:
    """The run's folder, absolute, and whether this process chose a fresh one in the run store."""
    named = run_dir or environ.get(RUN_DIR_ENV)
    if named:
        return Path(named).absolute(), False
    world, local = int(environ.get("WORLD_SIZE", 1)), int(environ.get("LOCAL_WORLD_SIZE", 0) or 0)
    if world > 1 and local and local < world:
        raise ConfigError(
            f"run_dir is not set for a launch over several nodes ({world} ranks, "
            f"{local} on this one): name a folder every node sees, "
            f"track(run_dir=...) or ${RUN_DIR_ENV}"
        )
    key = launch_key(environ)
    if key is None:
        name = f"{time.strftime('%Y%m%d-%H%M%S')}_{label}"
    else:  # the launch's start, the same for every rank: listings sort by time
        from ..procs import created_time

        started = time.localtime(created_time(os.getppid()) or 0)
        name = f"{time.strftime('%Y%m%d-%H%M%S', started)}_{label}-{key}"
    return (runs_root() / name).absolute(), True


def claim(path: Path, rank: int, record: dict, fresh: bool) -> Path:
    """Make the folder and, on rank 0, claim it and write the script's record (SCRIPT). A fresh
    name already taken by another run gets a suffix (one process only: ranks of a launch share
    theirs on purpose). A named folder must be new or empty, as for every run."""
    folder = RunFolder(path)
    if rank != 0:
        _make(path)
        return path
    if fresh and int(os.environ.get("WORLD_SIZE", 1)) <= 1:
        for n in range(1, 1000):
            if not path.exists():
                break
            path = path.with_name(f"{path.name.split('__')[0]}__{n}")
        folder = RunFolder(path)
    elif not fresh and int(os.environ.get("WORLD_SIZE", 1)) <= 1:
        usable_run_dir(path)
    elif not fresh:  # the other ranks of this launch may have begun their files already
        if folder.holds_run():
            raise ConfigError(f"run dir {str(path)!r} already holds a run; choose a new folder")
        others = sorted(p.name for p in path.iterdir() if not folder.is_rank_file(p)) if path.is_dir() else []
        if others:
            more = f" and {len(others) - 1} more" if len(others) > 1 else ""
            raise ConfigError(
                f"run dir {str(path)!r} is not empty (it holds {others[0]!r}{more}): "
                "a run needs a new or empty folder"
            )
    _make(path)
    try:
        fd = os.open(folder.run_id_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise ConfigError(f"run dir {str(path)!r} already holds a run; choose a new folder") from None
    except OSError as e:
        raise ConfigError(disk_message(path, e, "claiming the run folder")) from None
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(16))
    try:
        folder.write_script(record)
    except OSError as e:
        raise ConfigError(disk_message(folder.script_file, e, "writing the script's record")) from None
    return path


def _make(path: Path) -> None:
    try:
        make_dirs(path)
    except OSError as e:
        raise ConfigError(disk_message(path, e, "making the run folder")) from None
