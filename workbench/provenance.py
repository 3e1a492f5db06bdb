"""Which run folders this user's workbench made on this machine: the one fact the trust rule
(workbench.train.trust) stands on. A record per folder in this user's cache ($WORKBENCH_CACHE, else
~/.cache/workbench), outside the folder, keyed by the folder's real path and holding the random id
written into the folder when it was claimed (RUN_ID), its config's hash, and the code its config
names: for each factory, the file it resolved to (absolute) and that file's hash, with the hashes of
the files it imports from its own folder. A copied, moved, forged or edited folder does not match,
so it is not trusted; nor is one whose code changed since, or whose relative factory path resolves
to another file from where it is loaded now. Finding the files reads them; nothing is imported.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import json
import os
import socket
import sys
from pathlib import Path

from .cache import PRIVATE, cache_dir
from .config import BUILTIN_MODELS, RunConfig
from .disk import make_dirs, write_json_atomic
from .runfolder import RunFolder


def _record_path(run_dir: Path) -> Path:
    key = hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:32]
    return cache_dir() / "created-runs" / f"{key}.json"


def _fingerprint(run_dir: Path) -> dict:
    folder = RunFolder(run_dir)
    return {
        "path": str(run_dir.resolve()),
        "host": socket.gethostname(),
        "id": folder.run_id_file.read_text().strip(),
        "config_sha256": hashlib.sha256(folder.config_file.read_bytes()).hexdigest(),
    }


def named_code(cfg: RunConfig) -> list[tuple[str, str, dict]]:
    """(field, import path, kwargs) of every factory the config would call."""
    out = []
    if cfg.model.name not in BUILTIN_MODELS:
        out.append(("model.name", cfg.model.name, cfg.model.kwargs))
    if cfg.data.name == "dataset":
        out.append(("data.factory", cfg.data.factory, cfg.data.kwargs))
    return out


MAX_CODE_FILES = 200  # a factory's folder is a user's project, not a library: stop looking there


def _module_file(name: str, roots: list[Path]) -> Path | None:
    """Where `import name` would find its source under `roots`, found without importing anything."""
    rel = Path(*name.split("."))
    for root in roots:
        for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
            if candidate.is_file():
                return candidate.resolve()
    return None


def _local_imports(path: Path) -> list[Path]:
    """The files `path` imports from its own folder (as a script's local modules are found)."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return []
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module}
    found = (_module_file(name.split(".")[0], [path.parent]) for name in sorted(names))
    return [f for f in found if f is not None]


def code_files(spec: str) -> dict:
    """{"path": the file a factory spec resolves to from here, "files": {absolute path: sha256} of
    it and of the files it imports from its folder, transitively}. A module spec is looked up as
    `import` would find it (the current folder, then sys.path: an installed package's file counts
    too); no path and no files when no source file is found (a compiled or namespace module)."""
    target = spec.rpartition(":")[0]
    first = (
        Path(target).resolve()
        if target.endswith(".py")
        else _module_file(target, [Path.cwd(), *(Path(p or os.curdir) for p in sys.path)])
    )
    if first is None or not first.is_file():
        return {"path": None, "files": {}}
    out, todo = {}, [first]
    while todo and len(out) < MAX_CODE_FILES:
        path = todo.pop()
        if str(path) in out:
            continue
        try:
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            continue
        todo += _local_imports(path)
    return {"path": str(first), "files": out}


def _code(cfg: RunConfig) -> dict:
    return {field: {"spec": spec, **code_files(spec)} for field, spec, _ in named_code(cfg)}


def record_created(run_dir: str | Path, cfg: RunConfig) -> None:
    """Note, outside the folder, that this workbench made `run_dir` here, with the code it names."""
    path = _record_path(Path(run_dir))
    make_dirs(path.parent, PRIVATE)
    write_json_atomic(path, {**_fingerprint(Path(run_dir)), "code": _code(cfg)})


def created_here(run_dir: str | Path) -> bool:
    """True when this user's workbench created `run_dir` on this machine and its config is unchanged."""
    run_dir = Path(run_dir)
    try:
        record = json.loads(_record_path(run_dir).read_text())
        now = _fingerprint(run_dir)
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and all(
        hmac.compare_digest(str(record.get(k, "")), v) for k, v in now.items()
    )


def code_changed(run_dir: str | Path, cfg: RunConfig) -> str | None:
    """How the code `cfg` names, resolved from here now, differs from the code recorded when this
    workbench made `run_dir`, in a few words naming the file; None when it is the same."""
    try:
        recorded = json.loads(_record_path(Path(run_dir)).read_text()).get("code")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if not isinstance(recorded, dict):
        return "the code it names was not recorded when it was made"
    for field, now in _code(cfg).items():
        then = recorded.get(field) or {}
        files = then.get("files") or {}
        if then.get("spec") != now["spec"]:
            return f"{field} is {now['spec']!r}, not {then.get('spec')!r} as when it was made"
        if now["path"] != then.get("path"):
            return (
                f"{field} {now['spec']!r} resolves to {now['path']!r} from here, not to "
                f"{then.get('path')!r} as when it was made"
            )
        for path, digest in now["files"].items():
            if path not in files:
                return f"{field} {now['spec']!r} now imports {path!r}, which it did not when it was made"
            if not hmac.compare_digest(files[path], digest):
                return f"{path!r} ({field} {now['spec']!r}) changed since the run was made"
        gone = sorted(set(files) - set(now["files"]))
        if gone:
            return f"{gone[0]!r} ({field} {now['spec']!r}) is gone or no longer imported"
    return None
