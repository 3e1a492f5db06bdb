"""Take a run away from the workbench, run from the kernel or the CLI: a standalone script, its
torchrun commands and a SLURM job, and a check that the script reproduces the run. May import the
base, train/ and distributed/; the faces import it. `export(source, to_dir)` is the entry point."""

from .bundle import Export, export

__all__ = ["Export", "export"]
