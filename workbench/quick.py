"""Notebooks shrink their work when WORKBENCH_QUICK=1 (the test suite sets it); their default
settings still finish on a 2-core CPU in a few minutes."""

from __future__ import annotations

import os


def quick() -> bool:
    return os.environ.get("WORKBENCH_QUICK", "") not in ("", "0")


def scaled(default: int, quick_value: int) -> int:
    """`default` normally, `quick_value` under the test suite."""
    return quick_value if quick() else default
