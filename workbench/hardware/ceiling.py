"""One measured ceiling of a device: compute in GFLOP/s (GOP/s for int8) or bandwidth in GB/s, with
its spread and the same figure from torch.utils.benchmark as a check on the workbench's timer."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Ceiling:
    """One measured ceiling: compute in GFLOP/s (GOP/s for int8) or bandwidth in GB/s."""

    name: str  # "matmul bf16", "copy", "h2d pinned", "all-reduce"
    kind: str  # "compute" | "bandwidth"
    value: float
    unit: str
    median_ms: float
    spread: float
    size: str
    device: str
    dtype: str | None = None
    check: float | None = None  # the same op timed by torch.utils.benchmark, same unit
    note: str = ""
    other_cores: float | None = None  # cores other programs held while it was measured

    @property
    def check_ratio(self) -> float | None:
        return self.value / self.check if self.check else None

    def as_dict(self) -> dict:
        d = asdict(self)
        d["check_ratio"] = round(self.check_ratio, 3) if self.check_ratio else None
        return d
