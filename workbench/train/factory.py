"""A user's own code named by import path: "package.module:factory" or "path/to/file.py:factory".
The one loader of model factories, Dataset factories and scoring functions.

    build = load_factory("my_models.py:build", field="model.name")

A config is data, so what it names must be the user's code: anything from the standard library or
the interpreter's builtins (os.system, subprocess.run, builtins.exec, a stdlib file given by path,
or a user file that re-exports one of them) is refused whatever asked for it, decided by where the
module lives (the stdlib folders, or compiled into the interpreter), not by a list of names. Whether
a run folder's code may run at all is the trust rule's question (workbench.train.trust).
"""

from __future__ import annotations

import importlib
import importlib.util
import site
import sys
import sysconfig
from functools import lru_cache
from pathlib import Path

from ..config import ConfigError


@lru_cache(maxsize=1)
def _library_dirs() -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """(the standard library's folders, the folders of installed packages inside them)."""
    std, sites = set(), set()
    for scheme in (
        sysconfig.get_paths(),
        sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix}),
    ):
        std |= {Path(scheme[k]).resolve() for k in ("stdlib", "platstdlib")}
        sites |= {Path(scheme[k]).resolve() for k in ("purelib", "platlib")}
    sites |= {Path(p).resolve() for p in site.getsitepackages() + [site.getusersitepackages()]}
    return tuple(std), tuple(sites)


def _under(path: Path, folders) -> bool:
    return any(path == f or f in path.parents for f in folders)


def is_stdlib_file(path: str | Path) -> bool:
    std, sites = _library_dirs()
    path = Path(path).resolve()
    return _under(path, std) and not _under(path, sites)


def is_stdlib_module(name: str) -> bool:
    """True for a module compiled into the interpreter, frozen, or living in the stdlib folders.
    Looks the module up without importing it (only a top-level name is ever looked up)."""
    top = name.partition(".")[0]
    if not top or top in sys.builtin_module_names:
        return True
    module = sys.modules.get(top)
    origin = getattr(getattr(module, "__spec__", None), "origin", None) if module else None
    if origin is None:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return False
        if spec is None:
            return False
        origin = spec.origin
    return origin in ("built-in", "frozen") or (origin is not None and is_stdlib_file(origin))


def refuse_stdlib(spec: str, field: str) -> None:
    """Refuse an import path into the standard library or builtins, before anything is imported."""
    target = spec.rpartition(":")[0]
    stdlib = is_stdlib_file(target) if target.endswith(".py") else is_stdlib_module(target)
    if stdlib:
        raise ConfigError(
            f"{field} {spec!r} names the Python standard library or a builtin, not "
            "your code; name a factory you wrote: 'my_models.py:build' or "
            "'package.module:build'"
        )


def _refuse_stdlib_object(obj, spec: str, field: str) -> None:
    """A user file may re-export a stdlib callable (`build = os.system`): judge what it is."""
    module = getattr(obj, "__module__", None) or getattr(type(obj), "__module__", None)
    if not isinstance(module, str):
        module = type(obj).__module__
    loaded = sys.modules.get(module)
    path = getattr(loaded, "__file__", None) if loaded else None
    if (
        module in sys.builtin_module_names
        or module == "builtins"
        or (path and is_stdlib_file(path))
        or (not path and is_stdlib_module(module))
    ):
        raise ConfigError(
            f"{field} {spec!r} is {module}.{getattr(obj, '__name__', type(obj).__name__)}"
            " from the Python standard library, not your code; name a factory you "
            "wrote"
        )


def check_spec(spec: str, field: str = "model.name") -> None:
    """Everything that can be said about an import path without importing it: its form, that it
    is not the standard library, and that a file it names exists."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr.isidentifier():
        raise ConfigError(
            f"{field} must be 'package.module:factory' or 'path/to/file.py:factory', got {spec!r}"
        )
    refuse_stdlib(spec, field)
    if target.endswith(".py") and not Path(target).resolve().is_file():
        raise ConfigError(f"{field} {spec!r}: file {str(Path(target).resolve())!r} does not exist")


def load_factory(spec: str, field: str = "model.name"):
    """Resolve `spec` to a callable; every error names `field`."""
    check_spec(spec, field)
    target, _, attr = spec.rpartition(":")
    try:
        if target.endswith(".py"):
            path = Path(target).resolve()
            name = f"workbench_user_{path.stem}_{abs(hash(str(path)))}"
            mod_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[name] = module  # pickling and dataclasses look modules up here
            if str(path.parent) not in sys.path:  # its own local modules import, as in a script
                sys.path.insert(0, str(path.parent))
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"{field} {spec!r}: importing {target!r} failed: {type(e).__name__}: {e}") from e
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"{field} {spec!r}: {target!r} has no callable {attr!r}")
    _refuse_stdlib_object(factory, spec, field)
    return factory
