"""Training that resumes after a failure: with run.save_every = N, the latest resumable state (the
model, the optimizer, the gradient scaler, the step and the thread count) is kept in the run folder
every N steps; a restarted attempt (distributed.max_restarts), or a new run started on the same
folder or from it (run.resume_from), loads it on every rank, skips the batches already trained on,
and goes on from the next step, so it continues the same trajectory instead of starting from 0.

One format for one process, DDP, FSDP and the exported train.py: torch.distributed.checkpoint's.
Every rank writes its part (under DDP the replicas are written once), keyed by each parameter's
name, not its shard, with each tensor's whole shape; so a state saved under any strategy on any
number of ranks loads under any other, and the exported script and the workbench each go on from
what the other saved. The folder must be one the ranks share (one machine, or a shared file system).

    save_state(parts, step, resume_dir)    # every rank, at the same step
    load_state(parts, resume_dir)          # every rank; -> the step it was saved after (0: none)

Whole or not at all: the ranks write into a partial folder, which rank 0 renames to the step's own
folder once every rank has written (the save returns only then), and only after that removes the
older ones; a restart loads the newest step folder, so a save that dies half-way leaves the
previous state in place.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from ..config import ConfigError, error_line
from ..events import STEP_NUMBER, THREADS  # THREADS: the count the saved steps ran
from ..runfolder import SAVED_STEP, SAVING, RunFolder, saved_steps
from .rank import unwrap
from .state_index import check_state, refuse_earlier_format, write_index


def state_of(parts, step: int) -> dict:
    """What is saved, keyed by each parameter's name (not its shard or its DDP wrapper): the layout
    any strategy and rank count can load. On a fresh optimizer this creates its state first, so
    there is somewhere to load to. Copied into exported scripts, as is the rest of the format."""
    model, optimizer = get_state_dict(unwrap(parts.model), parts.opt)
    return {
        "model": model,
        "optimizer": optimizer,
        "scaler": parts.scaler.state_dict(),
        STEP_NUMBER: step,
        THREADS: torch.get_num_threads(),
    }


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


def save_state(parts, step: int, resume_dir) -> None:
    """Every rank: its part of the state after `step`, replacing the previous state whole."""
    resume_dir = Path(resume_dir)
    partial = resume_dir / SAVING
    if _rank() == 0:
        shutil.rmtree(partial, ignore_errors=True)  # left by an attempt that died while saving
    if dist.is_initialized():
        dist.barrier()  # nobody writes into it before it is emptied
    try:
        _checkpoint(dcp.save, state_of(parts, step), checkpoint_id=partial)
    except CheckpointException as e:
        raise _cause(e) from None
    if _rank() == 0:  # every rank has written: index the files, then make the state whole at once
        write_index(partial)
        done = resume_dir / SAVED_STEP.format(step=step)
        shutil.rmtree(done, ignore_errors=True)  # a state of this step from an earlier attempt
        partial.rename(done)
        for old, path in saved_steps(resume_dir).items():
            if old != step:
                shutil.rmtree(path)


def load_state(parts, resume_dir) -> int:
    """Every rank: load the newest saved state into the set-up model, optimizer and scaler (each
    rank reads what its part needs) and run the thread count its steps ran. Returns the step it
    was saved after (0: nothing saved)."""
    saved = saved_steps(Path(resume_dir))
    if not saved:
        return 0
    step = max(saved)
    path = saved[step]
    check_state(path)
    state = state_of(parts, 0)
    try:
        _checkpoint(dcp.load, state, checkpoint_id=path)
    except CheckpointException as e:
        raise ConfigError(
            f"the resumable state {str(path)!r} does not load into this run's model "
            f"and optimizer: {error_line(_cause(e))}"
        ) from None
    set_state_dict(
        unwrap(parts.model), parts.opt, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
    )
    parts.scaler.load_state_dict(state["scaler"])
    torch.set_num_threads(int(state[THREADS]))
    if state[STEP_NUMBER] != step:
        raise ConfigError(
            f"the resumable state {str(path)!r} holds step {state[STEP_NUMBER]}, not "
            f"{step} as its name says; the folder is damaged"
        )
    return step


def restore_state(s, run_dir, accum: int, resume_from: str = "") -> int:
    """Load the saved state, if any, into the set-up model, optimizer and scaler, and advance the
    batches past the steps it covers. The run's own folder first (a restarted attempt), else the
    folder it resumes from (run.resume_from). Returns the step it was saved after (0: none)."""
    if resume_from and not RunFolder(run_dir).holds_resumable_state():
        run_dir = resume_from
    refuse_earlier_format(run_dir)
    step = load_state(s.parts, RunFolder(run_dir).resume_dir)
    for _ in range(step * accum):  # the same data order as a run never interrupted
        next(s.batches)
    return step
