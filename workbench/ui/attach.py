"""Attach a live dashboard to any run folder: watch a run started elsewhere (the CLI, another
notebook) while it goes, or replay a finished one.

    dash = attach("runs/20260101-120000_mlp-bf16"); dash   # in a notebook cell
"""
from __future__ import annotations

from pathlib import Path

from ..config import ConfigError
from ..runstore import load_config, processes_alive
from .dashboard import LiveDashboard


def attach(run_dir: str | Path, start: bool = True, **kwargs) -> LiveDashboard:
    """A LiveDashboard on `run_dir`, sized from its config.json (ranks, steps), tailing it. Reads the
    folder only: nothing its config names is imported."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.json").is_file():
        raise ConfigError(f"run_dir {str(run_dir)!r} is not a run folder (no config.json); "
                          "pick one from workbench.runstore.list_runs()")
    cfg = load_config(run_dir)
    dash = LiveDashboard(run_dir, world_size=cfg.distributed.world_size, total_steps=cfg.run.planned_steps(),
                         alive=lambda: processes_alive(run_dir) is not False, **kwargs)
    return dash.start() if start else dash  # a run whose processes are gone is shown as ended
