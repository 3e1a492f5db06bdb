"""Whether a saved resumable state is whole, told without torch: rank 0 writes an index of the
state's files (each one's bytes and SHA-256) once every rank has written, and the CLI and the
launcher check the files against it before anything starts, in about a second at any load where
importing torch's own checkpoint reader takes several. A state without an index (one the exported
script saved) is checked by torch's reader instead (`check_whole`).

    write_index(step_folder)       # rank 0, after the save, before the folder is renamed whole
    check_saved_state(run_dir)     # one line naming the damaged file, or nothing
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..config import ConfigError
from ..runfolder import STATE_INDEX, RunFolder

CHUNK = 1 << 20


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def write_index(folder: Path) -> None:
    """Every file of the saved state in `folder`, with its bytes and SHA-256 (a plain write: the
    folder is made whole by its rename after this). Copied into exported scripts."""
    files = {
        p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(Path(folder).iterdir())
        if p.is_file() and p.name != STATE_INDEX
    }
    (Path(folder) / STATE_INDEX).write_text(json.dumps({"files": files}, indent=1))


def check_index(folder: Path) -> bool:
    """True when the state's index finds every file whole; False when the state has no index; a
    one-line ConfigError naming the first damaged file. Copied into exported scripts."""
    index = Path(folder) / STATE_INDEX
    if not index.is_file():
        return False
    try:
        files = json.loads(index.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(
            f"the index of the resumable state {str(index)!r} cannot be read ({type(e).__name__}); "
            "the folder is damaged"
        ) from None
    for name, want in sorted(files.items()):
        file = Path(folder) / name
        if not file.is_file():
            raise ConfigError(
                f"{str(file)!r} is missing: the resumable state's index names it; the folder is damaged"
            )
        held = file.stat().st_size
        if held != want["bytes"]:
            raise ConfigError(
                f"{str(file)!r} holds {held} bytes, the resumable state's index says {want['bytes']}; "
                "the folder is damaged" + (" (cut short)" if held < want["bytes"] else "")
            )
        if _sha256(file) != want["sha256"]:
            raise ConfigError(
                f"{str(file)!r} does not hold what was saved (its SHA-256 differs from the resumable "
                "state's index); the folder is damaged"
            )
    return True


def check_saved_state(run_dir) -> None:
    """Before launch: the state a run would go on from is whole and readable, or a one-line
    ConfigError naming the file, before any folder or rank exists (the ranks check again as they
    load it). An earlier version's state is named first: it is not "none"."""
    refuse_earlier_format(run_dir)
    steps = RunFolder(run_dir).saved_steps()
    if steps:
        check_state(steps[max(steps)])


def check_state(path: Path) -> None:
    """One saved step whole, or a one-line ConfigError naming the damaged file: by the workbench's
    index where the state has one, else by torch's own (`check_whole`). Copied into exported
    scripts."""
    if not check_index(path):
        check_whole(path)


def check_whole(path: Path) -> None:
    """Every file torch's own index of the state names is there and long enough, or a one-line
    ConfigError naming the file: a state saved without the workbench's index (the exported
    script's) is told damaged before any rank reads a tensor from it."""
    from torch.distributed.checkpoint import FileSystemReader  # seconds to import: only here

    try:
        index = FileSystemReader(path).read_metadata()
    except FileNotFoundError as e:
        raise ConfigError(
            f"the resumable state {str(path)!r} has no index of its parts "
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


def refuse_earlier_format(run_dir) -> None:
    """A folder with only an earlier version's state would start from step 0 without a word."""
    folder = RunFolder(run_dir)
    earlier = folder.earlier_state()
    if earlier is not None and not folder.holds_resumable_state():
        raise ConfigError(
            f"{str(earlier)!r} is a resumable state in the format of an earlier version, which "
            "this one does not read: go on with the version that saved it, or start in a new folder"
        )


def refuse_nothing_to_train(saved_step: int, steps: int) -> None:
    """A state saved after step `steps` or later leaves a run of `steps` nothing to train: said in
    one line, with how to extend it, before its first step."""
    if saved_step >= steps:
        raise ConfigError(
            f"run.steps {steps} is not past the resumable state, saved after step {saved_step}: "
            f"to extend the run, ask for more steps (--steps N, N > {saved_step})"
        )
