"""The training worker's command, the one every run folder, torchrun line and SLURM job names:

    python -m workbench.worker --config RUN_DIR/config.json

Its code lives in workbench.train.rank_process (what runs inside a rank); this entry point keeps the
command short and stable."""

from .procs import leave
from .train.rank_process import _main_recorded, main  # noqa: F401

if __name__ == "__main__":
    leave(_main_recorded())
