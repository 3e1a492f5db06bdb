"""Training that resumes after a failure: with run.save_every = N, rank 0 keeps the latest
resumable state in the run folder every N steps (the model, the optimizer, the gradient scaler and
the step), written whole or not at all; a restarted attempt (distributed.max_restarts) loads it on
every rank, skips the batches already trained on, and goes on from the next step, so it continues
the same trajectory instead of starting again from step 0.

Under DDP the ranks hold identical replicas and optimizer states, so rank 0's state is every
rank's. The run folder must be one the ranks share (one machine, or a shared file system).
"""
from __future__ import annotations

import io

import torch

from ..disk import write_atomic
from ..events import STEP_NUMBER
from ..runfolder import RunFolder
from .rank import unwrap


def save_state(s, step: int, run_dir) -> None:
    """Rank 0: the state after `step`, replacing the previous one atomically."""
    state = {STEP_NUMBER: step, "model": unwrap(s.parts.model).state_dict(),
             "optimizer": s.parts.opt.state_dict(),
             "scaler": s.parts.scaler.state_dict()}
    buffer = io.BytesIO()  # serialised first: a full disk is an OSError, not a torn file
    torch.save(state, buffer)
    write_atomic(RunFolder(run_dir).resume_file, buffer.getvalue())


def restore_state(s, run_dir, accum: int) -> int:
    """Load the saved state, if any, into the set-up model, optimizer and scaler, and advance the
    batches past the steps it covers. Returns the step it was saved after (0: nothing saved)."""
    path = RunFolder(run_dir).resume_file
    if not path.is_file():
        return 0
    state = torch.load(path, map_location=s.parts.device, weights_only=True)
    unwrap(s.parts.model).load_state_dict(state["model"])
    s.parts.opt.load_state_dict(state["optimizer"])
    s.parts.scaler.load_state_dict(state["scaler"])
    for _ in range(state[STEP_NUMBER] * accum):  # the same data order as a run never interrupted
        next(s.batches)
    return int(state[STEP_NUMBER])
