"""Rebuild a run's model from its folder and load its trained weights (weights only: no pickled
code runs, and a factory the config names runs only when the folder is trusted: workbench.train.trust).

    model = load_model("runs/20260101-120000_mlp-fp32")
    model = load_model("downloaded_run/", trust_code=True)   # you read its model file first
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..config import ConfigError
from ..runfolder import WEIGHTS, RunFolder
from .data import build_data
from .models import build_model
from .trust import check_trust


def load_model(run_dir: str | Path, trust_code: bool = False):
    run_dir = Path(run_dir)
    path = RunFolder(run_dir).weights_file
    if not path.is_file():
        raise ConfigError(f"run {str(run_dir)!r} has no saved weights ({WEIGHTS}); "
                          "it failed, was stopped, or ran with run.save_weights=false")
    cfg = RunFolder(run_dir).config()
    check_trust(run_dir, cfg, trust_code)  # before any of its code is imported
    model = build_model(cfg, build_data(cfg))
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return model.eval()
