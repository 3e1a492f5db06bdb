"""A user's own code named by import path: "package.module:factory" or "path/to/file.py:factory".
The one loader of model factories, Dataset factories and scoring functions.

    build = load_factory("my_models.py:build", field="model.name")
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from ..config import ConfigError


def load_factory(spec: str, field: str = "model.name"):
    """Resolve `spec` to a callable; every error names `field`."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr.isidentifier():
        raise ConfigError(f"{field} must be 'package.module:factory' or 'path/to/file.py:factory', "
                          f"got {spec!r}")
    try:
        if target.endswith(".py"):
            path = Path(target).resolve()
            if not path.is_file():
                raise ConfigError(f"{field} {spec!r}: file {str(path)!r} does not exist")
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
        raise ConfigError(f"{field} {spec!r}: importing {target!r} failed: "
                          f"{type(e).__name__}: {e}") from e
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"{field} {spec!r}: {target!r} has no callable {attr!r}")
    return factory
