"""What every sink receives, and which of a step record's figures are sent: the one list."""

from __future__ import annotations

import math
from typing import Protocol

from ..config import ConfigError
from ..events import (
    DATA_WAIT_MS,
    LOSS,
    MEM_ALLOCATED_GIB,
    MEM_PEAK_GIB,
    MEM_RESERVED_GIB,
    MFU,
    RSS_GIB,
    SAMPLES_PER_S,
    STEP_TIME_MS,
    TFLOPS,
)

# A step record's figures a sink charts, each with the group it is charted under.
SCALARS = {
    LOSS: "train",
    SAMPLES_PER_S: "speed",
    STEP_TIME_MS: "speed",
    DATA_WAIT_MS: "speed",
    TFLOPS: "hardware",
    MFU: "hardware",
    RSS_GIB: "memory",
    MEM_ALLOCATED_GIB: "memory",
    MEM_RESERVED_GIB: "memory",
    MEM_PEAK_GIB: "memory",
}


class Sink(Protocol):
    def start(self, record: dict) -> None:
        """The run begins: its record (label, command, `params`: its settings, flat)."""

    def step(self, step: int, figures: dict) -> None:
        """One step's record as the run writes it."""

    def finish(self, summary: dict) -> None:
        """The run ended: its summary (status, final figures) and, where it took part in an A/B,
        the verdict in summary['tags']."""


def scalars_of(figures: dict) -> dict[str, float]:
    """The step's figures a sink sends, named group/figure ('speed/samples_per_s'), finite only.

    :param figures: a step record as the run writes it; its figures not in SCALARS are left out.
    """
    out = {}
    for key, group in SCALARS.items():
        value = figures.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[f"{group}/{key}"] = float(value)
    return out


def final_figures(summary: dict) -> dict[str, float]:
    """The summary's numbers (a run's final figures), finite only."""
    return {
        k: float(v)
        for k, v in summary.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


def needs(module: str, extra: str, what: str):
    """Import an optional library, or refuse in one line saying how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        missing = getattr(e, "name", None) or module.split(".")[0]
        raise ConfigError(f"{what} needs the {missing} package: pip install 'workbench[{extra}]'") from None
