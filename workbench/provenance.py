"""Which run folders this user's workbench made on this machine: the one fact the trust rule
(workbench.train.trust) stands on. A record per folder in this user's cache ($WORKBENCH_CACHE, else
~/.cache/workbench), outside the folder, keyed by the folder's real path and holding the random id
written into the folder when it was claimed (RUN_ID) and its config's hash. A copied, moved,
forged or edited folder does not match, so it is not trusted.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import socket
from pathlib import Path

from .cache import cache_dir
from .disk import write_json_atomic
from .runfolder import RunFolder


def _record_path(run_dir: Path) -> Path:
    key = hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:32]
    return cache_dir() / "created-runs" / f"{key}.json"


def _fingerprint(run_dir: Path) -> dict:
    folder = RunFolder(run_dir)
    return {"path": str(run_dir.resolve()), "host": socket.gethostname(),
            "id": folder.run_id_file.read_text().strip(),
            "config_sha256": hashlib.sha256(folder.config_file.read_bytes()).hexdigest()}


def record_created(run_dir: str | Path) -> None:
    """Note, outside the folder, that this workbench made `run_dir` here."""
    path = _record_path(Path(run_dir))
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_json_atomic(path, _fingerprint(Path(run_dir)))


def created_here(run_dir: str | Path) -> bool:
    """True when this user's workbench created `run_dir` on this machine and its config is unchanged."""
    run_dir = Path(run_dir)
    try:
        record = json.loads(_record_path(run_dir).read_text())
        now = _fingerprint(run_dir)
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and all(
        hmac.compare_digest(str(record.get(k, "")), v) for k, v in now.items())
