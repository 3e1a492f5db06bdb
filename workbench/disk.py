"""Files on disk that fail honestly: a filesystem error told in one line (the path, the cause, what
to do), writes that leave nothing half-written behind, and free space measured, not assumed.
Stdlib only (the config stands on it); what writes a run folder, an export or a cache uses it.

    write_atomic(path, text)                          # a reader sees the old file or the new one
    raise ConfigError(disk_message(path, e, "writing the run folder"))
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

# What to do about each cause, by errno.
ADVICE = {
    errno.ENOSPC: "free some space there or choose a folder on another disk",
    errno.EDQUOT: "your disk quota is used up: free some space or choose another folder",
    errno.EROFS: "that file system is mounted read-only: choose a writable folder",
    errno.EACCES: "you may not write there: choose a folder you own",
    errno.EPERM: "you may not write there: choose a folder you own",
    errno.ENOTDIR: "a part of that path is a file, not a folder: choose another path",
    errno.EISDIR: "that path is a folder, not a file: choose a file name",
    errno.ENOENT: "that folder cannot be made there: choose a folder under your home or /tmp",
    errno.ENAMETOOLONG: "choose a shorter path",
    errno.EEXIST: "something already exists there: choose a new path",
}
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_message(path, e: OSError, doing: str = "writing") -> str:
    """One line for a filesystem error: "writing '/x/y' failed: No space left on device; free ..."."""
    cause = e.strerror or type(e).__name__
    where = e.filename if e.filename is not None else path
    advice = ADVICE.get(e.errno, "check that the folder exists, is writable and has free space")
    return f"{doing} {str(where)!r} failed: {cause}; {advice}"


def is_disk_full(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in DISK_FULL


OTHERS_WRITE = 0o022  # write permission for the group and for others: on nothing the workbench makes


def keep_writes_to_owner() -> None:
    """What this process and its children create is writable by its owner only, whatever umask it
    was started with: the workbench's own processes (supervisor, rank, pre-launch check) call this
    first, so torchrun's logs and the cached data they write are never world-writable."""
    os.umask(os.umask(OTHERS_WRITE) | OTHERS_WRITE)


def make_dirs(path: str | Path, mode: int = 0o755) -> Path:
    """Make `path` and any missing parents, each with `mode` (mkdir -p gives parents the umask's
    default, which a umask of 000 makes world-writable). An existing folder is left as it is."""
    target = Path(path)
    missing, here = [], target
    while not here.is_dir() and here != here.parent:
        missing.append(here)
        here = here.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=mode)
        except FileExistsError:
            if not folder.is_dir():  # a file where a folder must be: as mkdir -p says it
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder)) from None
    return target


def open_log(path: str | Path):
    """`path` opened for appending bytes, made readable by all and writable by its owner only."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644), "ab")


def write_atomic(path: str | Path, content: str | bytes) -> None:
    """Write `content` to `path` through a uniquely named temporary file in the same folder, renamed
    into place: a reader sees the old file or the new one, two writers never share a temporary file,
    and a failed write (a full disk) leaves no temporary file behind."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content.encode() if isinstance(content, str) else content)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def json_safe(value):
    """`value` with NaN and infinities as None: json.dumps would write them as NaN/Infinity, which
    is not JSON (a diverged run's final loss is NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write_json_atomic(path: str | Path, data: dict) -> None:
    """Valid JSON, whatever the numbers: non-finite ones are written as null."""
    write_atomic(path, json.dumps(json_safe(data), indent=2, sort_keys=True, allow_nan=False))


def free_bytes(path: str | Path) -> int | None:
    """Free bytes on the file system holding `path` (or its nearest existing parent); None where
    that is no disk (/proc, /sys: writing there fails for another reason, said when it is tried)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return None
    return usage.free if usage.total else None


def mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB" if n < 2**30 else f"{n / 2**30:.2f} GiB"


class Reserve:
    """A few hundred KiB held on a run folder's disk from the start, given back just before the
    final summary is written, so a run that filled the disk can still say so in summary.json."""

    NAME = ".space-reserve"
    SIZE = 256 * 1024

    def __init__(self, folder: str | Path):
        self.path = Path(folder) / self.NAME

    def hold(self) -> None:
        with open(self.path, "wb") as f:
            f.write(b"\0" * self.SIZE)
            f.flush()
            os.fsync(f.fileno())

    def release(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
