"""Run every benchmark module in this package (or those named): python -m workbench.bench [NAME...]"""
from __future__ import annotations

import importlib
import pkgutil
import sys

import workbench.bench as pkg


def main(argv: list[str]) -> int:
    names = sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))
    unknown = [n for n in argv if n not in names]
    if unknown:
        print(f"unknown benchmark {unknown[0]!r}; choose from: {', '.join(names)}", file=sys.stderr)
        return 2
    failed = 0
    for name in argv or names:
        print(f"\n=== {name} ===", flush=True)
        failed += importlib.import_module(f"workbench.bench.{name}").main([]) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
