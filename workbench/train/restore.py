"""Rebuild a run's model from its folder and load its trained weights (weights only: no pickled
code runs, and a factory the config names runs only when the folder is trusted: workbench.train.trust).

    model = load_model("runs/20260101-120000_mlp-fp32")
    model = load_model("downloaded_run/", trust_code=True)   # you read its model file first
"""

from __future__ import annotations

import pickle
import zipfile
from collections.abc import Mapping
from pathlib import Path

import torch

from ..config import ConfigError
from ..runfolder import WEIGHTS, RunFolder
from .data import build_data
from .models import build_model
from .trust import check_trust


def load_saved(path: str | Path, what: str = "weights", map_location="cpu"):
    """A saved file of tensors (a state dict, or a resumable state of dicts of them), loaded weights
    only: nothing pickled in it runs. A file that holds anything else, or is not a torch file at
    all, is refused in one line naming it, never with torch's advice to load it unsafely."""
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        blocked = next(
            (line.strip() for line in str(e).splitlines() if "GLOBAL" in line or "Unsupported" in line), ""
        )
        held = f" ({blocked.rstrip('.')})" if blocked else ""
        raise ConfigError(
            f"{what} file {str(path)!r} is not plain tensors{held}: refused, because "
            "loading it would run code it carries; save with "
            "torch.save(model.state_dict(), path)"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as e:
        raise ConfigError(
            f"{what} file {str(path)!r} cannot be read as a torch file: "
            f"{type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else 'truncated'}"
        ) from None
    if not isinstance(state, Mapping):
        raise ConfigError(
            f"{what} file {str(path)!r} holds a {type(state).__name__}, not a dict of tensors (a state dict)"
        )
    return state


def load_model(run_dir: str | Path, trust_code: bool = False):
    run_dir = Path(run_dir)
    path = RunFolder(run_dir).weights_file
    if not path.is_file():
        raise ConfigError(
            f"run {str(run_dir)!r} has no saved weights ({WEIGHTS}); "
            "it failed, was stopped, or ran with run.save_weights=false"
        )
    cfg = RunFolder(run_dir).config()
    check_trust(run_dir, cfg, trust_code)  # before any of its code is imported
    model = build_model(cfg, build_data(cfg))
    try:
        model.load_state_dict(load_saved(path))
    except RuntimeError as e:  # names and shapes that are not this model's (a forged or mixed folder)
        first = next((ln.strip() for ln in str(e).splitlines()[1:] if ln.strip()), str(e).splitlines()[0])
        raise ConfigError(
            f"weights file {str(path)!r} does not fit the model its folder's config builds "
            f"({cfg.model.name}): {first[:300]}"
        ) from None
    return model.eval()
