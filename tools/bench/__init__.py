"""Benchmarks behind `make bench`: each module here has `main(argv=None) -> int` and prints ratios
measured side by side in one run. `python -m tools.bench [NAME ...]` runs all or some."""
