"""PyTorch optimization workbench: configs, a training worker, events and run store, and the
notebook widgets on top. Import the pieces you need; nothing here imports torch eagerly.

Folders follow the process that runs their code, and imports point down this list:
  ui/, cli/, bench/, gpucheck/         the faces: widgets, the `workbench` command, benchmarks,
                                       the one-command check of every GPU path
  compress/ loading/ hardware/ stacking/ export/ trials/ profile/ tune/
                                       the labs (the kernel or the CLI runs them): pruning and
                                       quantization, data loading, the hardware report, the
                                       stacking study, exports, interleaved A/B trials, profiling,
                                       the tune search
  distributed/                         what owns the ranks: the Launcher, supervisor, torchrun, SLURM
  train/                               what runs inside a rank: worker, trainer, models, data
  machine/                             what this machine is and can do
  config, runfolder, runstore, events, disk, provenance, cache, measure/, net, procs, quick
                                       the shared base: the frozen RunConfig, the one owner of a
                                       run folder's files, the run store, events on disk
"""
from .config import ConfigError, RunConfig

__all__ = ["ConfigError", "RunConfig"]
__version__ = "0.1.0"
