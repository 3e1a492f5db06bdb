"""Run every benchmark module in this package (or those named): python -m tools.bench [NAME...]
One benchmark takes its own options after its name: python -m tools.bench NAME [OPTIONS]
`notebooks` (every notebook with its defaults, about half an hour) and `tunes` (a 10-minute tune
of each README example) run only when named."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import tools.bench as pkg
from tools.bench.results import benchmark_starts

NAMED_ONLY = {"notebooks", "tunes"}  # too long for `make bench`
HELPERS = {"results"}  # not a benchmark: where the others write


def main(argv: list[str]) -> int:
    names = sorted(
        m.name
        for m in pkgutil.iter_modules(pkg.__path__)
        if not m.name.startswith("_") and m.name not in HELPERS
    )
    split = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    chosen, options = argv[:split], argv[split:]
    unknown = [n for n in chosen if n not in names]
    if unknown:
        print(f"unknown benchmark {unknown[0]!r}; choose from: {', '.join(names)}", file=sys.stderr)
        return 2
    if options and len(chosen) != 1:  # each benchmark has its own options
        print("options go after exactly one benchmark: python -m tools.bench NAME [OPTIONS]", file=sys.stderr)
        return 2
    failed = 0
    for name in chosen or [n for n in names if n not in NAMED_ONLY]:
        if not options:  # with options, one benchmark whose output may be JSON
            print(f"\n=== {name} ===", flush=True)
        benchmark_starts()
        failed += importlib.import_module(f"tools.bench.{name}").main(options) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
