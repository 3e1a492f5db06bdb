"""The workbench's cache folder, shared by every process of this user on this machine:
$WORKBENCH_CACHE, else ~/.cache/workbench. It holds what is measured or built once and reused
(ceilings, lessons, FLOP counts per model and shape, the digits as tensors); deleting it only
costs the time to make them again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .disk import make_dirs, write_json_atomic

PRIVATE = 0o700  # the cache's folders: what a run loads from them is this user's alone


def cache_dir() -> Path:
    return Path(os.environ.get("WORKBENCH_CACHE") or Path.home() / ".cache" / "workbench")


def read_json(name: str) -> dict:
    """A JSON object from the cache, or {} when it is missing or unreadable."""
    try:
        data = json.loads((cache_dir() / name).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def write_json(name: str, data: dict) -> bool:
    """Write atomically (a reader never sees half a file); False when the cache cannot be written,
    which only means the thing is made again next time."""
    path = cache_dir() / name
    try:
        make_dirs(path.parent, PRIVATE)
        write_json_atomic(path, data)
        return True
    except OSError:
        return False
