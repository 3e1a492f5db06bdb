"""Training that resumes after a failure: with run.save_every = N, the latest resumable state (the
model, the optimizer, the gradient scaler and the step) is kept in the run folder every N steps,
written whole or not at all; a restarted attempt (distributed.max_restarts), or a new run started
on the same folder, loads it on every rank, skips the batches already trained on, and goes on from
the next step, so it continues the same trajectory instead of starting again from step 0.

Under DDP the ranks hold identical replicas and optimizer states, so rank 0's state is every
rank's: rank 0 writes it as one file. Under FSDP each rank holds only its shards, so every rank
writes its own (workbench.train.sharded_resume), loadable on another number of ranks. The run
folder must be one the ranks share (one machine, or a shared file system).
"""

from __future__ import annotations

import io
import zipfile

import torch

from ..config import ConfigError, error_line
from ..disk import write_atomic
from ..events import STEP_NUMBER
from ..runfolder import RunFolder
from .rank import unwrap
from .sharded_resume import check_whole, restore_sharded, save_sharded


def whole_state(parts, step: int) -> bytes:
    """The resumable state after `step` (model, optimizer, gradient scaler, step), serialised.
    Copied into exported scripts, which write and read the same file."""
    state = {
        STEP_NUMBER: step,
        "model": unwrap(parts.model).state_dict(),
        "optimizer": parts.opt.state_dict(),
        "scaler": parts.scaler.state_dict(),
        "threads": torch.get_num_threads(),
    }  # a sum's order: the resume runs the same count
    buffer = io.BytesIO()  # serialised first: a full disk is an OSError, not a torn file
    torch.save(state, buffer)
    return buffer.getvalue()


def load_whole_state(parts, path) -> int:
    """Load a `whole_state` file into the set-up model, optimizer and scaler; the step it was
    saved after. Copied into exported scripts."""
    state = torch.load(path, map_location=parts.device, weights_only=True)
    step = int(state[STEP_NUMBER])
    if "threads" in state:  # the count the saved steps ran: another sums in another order
        torch.set_num_threads(int(state["threads"]))
    unwrap(parts.model).load_state_dict(state["model"])
    parts.opt.load_state_dict(state["optimizer"])
    parts.scaler.load_state_dict(state["scaler"])
    return step


def save_state(s, step: int, run_dir, sharded: bool = False) -> None:
    """The state after `step`, replacing the previous one atomically: rank 0 alone, or (sharded)
    every rank its shards."""
    if sharded:
        save_sharded(s, step, run_dir)
        return
    write_atomic(RunFolder(run_dir).resume_file, whole_state(s.parts, step))


def restore_state(s, run_dir, accum: int, sharded: bool = False, resume_from: str = "") -> int:
    """Load the saved state, if any, into the set-up model, optimizer and scaler, and advance the
    batches past the steps it covers. The run's own folder first (a restarted attempt), else the
    folder it resumes from (run.resume_from). Returns the step it was saved after (0: none)."""
    if resume_from and not RunFolder(run_dir).holds_resumable_state():
        run_dir = resume_from
    _check_kind(run_dir, sharded)
    step = restore_sharded(s, run_dir) if sharded else _restore_whole(s, run_dir)
    for _ in range(step * accum):  # the same data order as a run never interrupted
        next(s.batches)
    return step


def check_saved_state(run_dir, sharded: bool) -> None:
    """Before launch, in the launcher: the state a run would go on from is of its strategy, whole
    and readable, or a one-line ConfigError naming the file, before any folder or rank exists (the
    ranks ask the same again as they load it)."""
    _check_kind(run_dir, sharded)
    folder = RunFolder(run_dir)
    steps = folder.sharded_steps()
    if sharded and steps:
        check_whole(steps[max(steps)])
    elif not sharded and folder.resume_file.is_file():
        _check_whole_file(folder.resume_file)


def _check_whole_file(path) -> None:
    """resume.pt is a zip archive (torch.save's format): every member present and its checksum
    right, or the file was cut short or overwritten."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise ConfigError(
            f"the resumable state {str(path)!r} cannot be read ({error_line(e)}); the folder is damaged"
        ) from None
    if bad:
        raise ConfigError(
            f"the resumable state {str(path)!r} cannot be read (its member {bad!r} "
            "fails its checksum); the folder is damaged"
        )


def _check_kind(run_dir, sharded: bool) -> None:
    """A folder's saved state is of the strategy that wrote it: loaded as the other, the run would
    start from step 0 without a word, so that is refused in one line."""
    folder = RunFolder(run_dir)
    if sharded and folder.resume_file.is_file():
        found, saved_by = folder.resume_file, "ddp"
    elif not sharded and folder.sharded_steps():
        found, saved_by = folder.sharded_resume_dir, "fsdp"
    else:
        return
    raise ConfigError(
        f"{str(found)!r} is a resumable state saved with distributed.strategy="
        f"{saved_by}, and this run's is {'fsdp' if sharded else 'ddp'}: resume it with "
        "the strategy it was saved with, or start in a new folder"
    )


def _restore_whole(s, run_dir) -> int:
    path = RunFolder(run_dir).resume_file
    if not path.is_file():
        return 0
    try:
        return load_whole_state(s.parts, path)
    except Exception as e:  # noqa: BLE001 - a torn, foreign or truncated file is the same damage
        raise ConfigError(
            f"the resumable state {str(path)!r} cannot be read ({error_line(e)}); the folder is damaged"
        ) from None
