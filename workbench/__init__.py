"""PyTorch optimization workbench: configs, a training worker, events and run store, and the
notebook widgets on top. Import the pieces you need; nothing here imports torch eagerly.

Folders follow the process that runs their code, and imports point down this list:
  ui/, cli/, bench/                    the faces: widgets, the `workbench` command, benchmarks
  compress/ loading/ hardware/ stacking/ export/    the labs (the kernel or the CLI runs them)
  distributed/                         what owns the ranks: launcher, supervisor, torchrun, SLURM
  train/                               what runs inside a rank: worker, trainer, models, data
  machine/                             what this machine is and can do
  config, disk, events, provenance, runstore, measure/, net, procs, quick    the shared base
"""
from .config import ConfigError, RunConfig

__all__ = ["ConfigError", "RunConfig"]
__version__ = "0.1.0"
