"""The resumable state under FSDP (run.save_every with distributed.strategy 'fsdp'): every rank
writes its own shards of the model and the optimizer, with the step and the gradient scaler, in
torch.distributed.checkpoint's format, so no rank ever gathers the whole model to save it.

    save_sharded(s, step, run_dir)    # every rank, at the same step
    restore_sharded(s, run_dir)       # every rank; -> the step it was saved after (0: none saved)

Whole or not at all: the ranks write into a partial folder, which rank 0 renames to the step's
own folder once every rank has written (the save returns only then), and only after that removes
the older ones; a restart loads the newest step folder, so a save that dies half-way leaves the
previous state in place. The format records each tensor's whole shape and which part of it each
file holds, so a state saved on N ranks loads on any number of ranks, one process included (whose
model is not sharded at all).
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import CheckpointException, FileSystemReader
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from ..config import ConfigError, error_line
from ..events import STEP_NUMBER
from ..runfolder import RunFolder
from .rank import unwrap


def _state(s, step: int) -> dict:
    """What is saved, keyed by each parameter's name (not its shard): the layout any rank count
    can load. On a fresh optimizer this creates its state first, so there is somewhere to load to."""
    model, optimizer = get_state_dict(unwrap(s.parts.model), s.parts.opt)
    return {"model": model, "optimizer": optimizer, "scaler": s.parts.scaler.state_dict(), STEP_NUMBER: step}


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _cause(e: CheckpointException) -> BaseException:
    """The first rank's own error inside the checkpoint's wrapper (a full disk stays an OSError)."""
    failures = e.failures
    return failures[min(failures)][0] if failures else e


def _checkpoint(fn, *args, **kwargs):
    """A save or load with every rank, or alone in a single process (without a process group it
    warns that it works locally: meant here, so not shown)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        return fn(*args, no_dist=not dist.is_initialized(), **kwargs)


def save_sharded(s, step: int, run_dir) -> None:
    """Every rank: its shards of the state after `step`, replacing the previous state whole."""
    folder = RunFolder(run_dir)
    partial = folder.sharded_partial_dir
    if _rank() == 0:
        shutil.rmtree(partial, ignore_errors=True)  # left by an attempt that died while saving
    if dist.is_initialized():
        dist.barrier()  # nobody writes into it before it is emptied
    try:
        _checkpoint(dcp.save, _state(s, step), checkpoint_id=partial)
    except CheckpointException as e:
        raise _cause(e) from None
    if _rank() == 0:
        done = folder.sharded_step_dir(step)
        shutil.rmtree(done, ignore_errors=True)  # a state of this step from an earlier attempt
        partial.rename(done)
        for old, path in folder.sharded_steps().items():
            if old != step:
                shutil.rmtree(path)


def restore_sharded(s, run_dir) -> int:
    """Every rank: load the newest saved state into the set-up model, optimizer and scaler (each
    rank reads what its shards need). Returns the step it was saved after (0: nothing saved)."""
    saved = RunFolder(run_dir).sharded_steps()
    if not saved:
        return 0
    step = max(saved)
    path = saved[step]
    check_whole(path)
    state = _state(s, 0)
    try:
        _checkpoint(dcp.load, state, checkpoint_id=path)
    except CheckpointException as e:
        raise ConfigError(
            f"the resumable state {str(path)!r} does not load into this run's model "
            f"and optimizer: {error_line(_cause(e))}"
        ) from None
    set_state_dict(
        unwrap(s.parts.model),
        s.parts.opt,
        model_state_dict=state["model"],
        optim_state_dict=state["optimizer"],
    )
    s.parts.scaler.load_state_dict(state["scaler"])
    if state[STEP_NUMBER] != step:
        raise ConfigError(
            f"the resumable state {str(path)!r} holds step {state[STEP_NUMBER]}, not "
            f"{step} as its name says; the folder is damaged"
        )
    return step


def check_whole(path: Path) -> None:
    """Every file the state's index names is there and long enough, or a one-line ConfigError
    naming the file: a damaged folder is told before any rank reads a tensor from it."""
    try:
        index = FileSystemReader(path).read_metadata()
    except FileNotFoundError as e:
        raise ConfigError(
            f"the resumable state {str(path)!r} has no index of its shards "
            f"({e.filename!r} is missing); the folder is damaged"
        ) from None
    except Exception as e:  # noqa: BLE001 - any unreadable index is the same damage
        raise ConfigError(
            f"the index of the resumable state {str(path)!r} cannot be read "
            f"({type(e).__name__}: {e}); the folder is damaged"
        ) from None
    need: dict[str, int] = {}
    for item in index.storage_data.values():
        need[item.relative_path] = max(need.get(item.relative_path, 0), item.offset + item.length)
    for name, size in sorted(need.items()):
        file = path / name
        if not file.is_file():
            raise ConfigError(
                f"{str(file)!r} is missing: the resumable state's index names it; the folder is damaged"
            )
        held = file.stat().st_size
        if held < size:
            raise ConfigError(
                f"{str(file)!r} holds {held} bytes, the resumable state's index "
                f"needs {size}; the folder is damaged (cut short)"
            )
