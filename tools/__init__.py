"""What the project's maintainers and its tests run, kept out of the package a user installs: the
benchmarks (`python -m tools.bench`), the GPU acceptance check (`python -m tools.gpucheck`), a local
SLURM cluster (`python -m tools.localslurm`), the test network it lives on, and the docs' build
hooks. Run from the repository root; the package never imports anything here."""
