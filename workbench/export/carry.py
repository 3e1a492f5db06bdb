"""The user's code an export carries: the factory named by model.name or data.factory and every
local module it imports, found by parsing `import` statements (never by importing anything), so
the exported script runs where the user's folder is not.

    from workbench.export.carry import carry
    carried = carry("models/resnet.py:build", "model.name", to_dir)   # resnet.py, blocks.py, ...
    carried.spec, carried.files, carried.installed    # 'resnet.py:build', [...], ['torch']

A module is local when it lies in the factory's folder (a file, or a package with __init__.py);
it is installed when Python finds it elsewhere (torch, transformers: the cluster needs them too,
and the export says so); anything else is an error naming the module and the file importing it.
Imports inside `try:` blocks are optional and never an error.
"""

from __future__ import annotations

import ast
import importlib.util
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..config import ConfigError


@dataclass
class Carried:
    spec: str  # how the exported script names the factory
    files: list[Path] = field(default_factory=list)  # the copies, inside the export
    installed: list[str] = field(default_factory=list)  # outside packages the code imports


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(dotted module, relative level, optional) for every import in a file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    optional = {
        id(n) for t in ast.walk(tree) if isinstance(t, ast.Try) for stmt in t.body for n in ast.walk(stmt)
    }
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, 0, id(node) in optional) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            out.append((base, node.level, id(node) in optional))
            out += [(f"{base}.{a.name}" if base else a.name, node.level, True) for a in node.names]
    return out  # "from x import name" may name a submodule or an attribute: optional either way


def _module_file(root: Path, dotted: str) -> list[Path]:
    """The files under `root` that importing `dotted` runs (packages' __init__ on the way)."""
    files, here = [], root
    for part in dotted.split("."):
        if (here / part / "__init__.py").is_file():
            here = here / part
            files.append(here / "__init__.py")
        elif (here / f"{part}.py").is_file():
            files.append(here / f"{part}.py")
            return files
        else:
            return files if files and here != root else []
    return files


def _is_installed(top: str) -> bool:
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return True
    try:
        return importlib.util.find_spec(top) is not None  # a top-level name: found, not imported
    except (ImportError, ValueError):
        return False


def local_modules(starts: list[Path], root: Path, field_name: str) -> tuple[list[Path], list[str]]:
    """Every file under `root` that `starts` need, and the outside packages they import."""
    todo, seen, installed = list(starts), set(starts), set()
    while todo:
        path = todo.pop()
        for dotted, level, optional in _imports(path):
            base = path.parent
            for _ in range(max(level - 1, 0)):
                base = base.parent
            found = _module_file(base if level else root, dotted) if dotted else []
            if not found and level:
                found = [path.parent / "__init__.py"] if (path.parent / "__init__.py").is_file() else []
            if found:
                for f in found:
                    if f not in seen:
                        seen.add(f)
                        todo.append(f)
            elif level == 0 and _is_installed(dotted.split(".")[0]):
                installed.add(dotted.split(".")[0])
            elif not optional:
                raise ConfigError(
                    f"{field_name}: {path.name} imports {dotted!r}, which is neither next to it "
                    f"(in {root}) nor installed, so the exported script could not import it; put "
                    f"it in {root} or install it, then export again"
                )
    return sorted(seen), sorted(installed - set(sys.stdlib_module_names))


def carry(spec: str, field_name: str, to_dir: Path) -> Carried:
    """Copy the code behind `spec` into `to_dir`; returns how the script names it and what it
    copied. A module path ('pkg.mod:fn') is looked up under the current folder."""
    target, _, attr = spec.rpartition(":")
    if target.endswith(".py"):
        start = Path(target).resolve()
        if not start.is_file():
            raise ConfigError(
                f"{field_name} {spec!r}: file {str(start)!r} does not exist, so it "
                "cannot be exported with the script"
            )
        root, starts, new_spec = start.parent, [start], f"{start.name}:{attr}"
    else:
        root = Path.cwd()
        files = _module_file(root, target)
        if not files:
            if _is_installed(target.split(".")[0]):
                return Carried(spec, installed=[target.split(".")[0]])
            raise ConfigError(
                f"{field_name} {spec!r}: module {target!r} is not under the current "
                f"folder ({root}) nor installed, so it cannot be exported"
            )
        starts, new_spec = files, spec
    files, installed = local_modules(starts, root, field_name)
    copies = []
    for f in files:
        dest = to_dir / f.relative_to(root)
        if dest.exists() and dest.read_bytes() != f.read_bytes():
            raise ConfigError(
                f"{field_name} {spec!r}: {dest.relative_to(to_dir)} would overwrite "
                "another file of the export with a different one of the same name"
            )
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest)
        copies.append(dest)
    return Carried(new_spec, copies, installed)
