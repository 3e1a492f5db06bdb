"""PyTorch optimization workbench: configs, a training worker, events and run store, and the
notebook widgets on top. Import the pieces you need; nothing here imports torch eagerly.

Folders follow the process that runs their code, and imports point down this list:
  ui/, cli/                            the faces: the notebook's widgets, the `workbench` command
  compress/ loading/ hardware/ stacking/ export/ trials/ profile/ tune/
                                       the labs (the kernel or the CLI runs them): pruning and
                                       quantization, data loading, the hardware report, the
                                       stacking study, exports, interleaved A/B trials, profiling,
                                       the tune search
  distributed/                         what owns the ranks: the Launcher, supervisor, torchrun, SLURM
  train/ tracking/                     what runs inside a rank: the workbench's worker, trainer,
                                       models and data; a user's own script's tracker
  machine/                             what this machine is and can do
  config, runfolder, runstore, events, disk, provenance, cache, measure/, net, procs, quick
                                       the shared base: the frozen RunConfig, the one owner of a
                                       run folder's files, the run store, events on disk

The benchmarks, the GPU check and the local SLURM cluster are harnesses run from the checkout
(tools/ beside this folder): the package never imports them, and a wheel does not ship them.
"""

from .config import ConfigError, RunConfig

__all__ = ["ConfigError", "RunConfig", "track"]


def track(*args, **kwargs):
    """Track your own training loop: `run = workbench.track(config=...)`, then
    `with run.step(samples=n) as step: ...` around each step (workbench.tracking). Imports torch."""
    from .tracking import track as start

    return start(*args, **kwargs)


__version__ = "0.1.0"
