"""The profile lab's own preset, apart from the lab's heavy modules: the command line builds and
checks it before anything imports torch."""

from __future__ import annotations

from ..config import DataConfig, LoaderConfig, ModelConfig, RunConfig
from ..quick import scaled


def default_transformer() -> RunConfig:
    """The workbench's small transformer language model (d256, 2 layers, sequence 64, batch 64);
    smaller under WORKBENCH_QUICK."""
    return RunConfig(
        model=ModelConfig(name="transformer", width=scaled(256, 64), depth=2, heads=4),
        data=DataConfig(name="text", seq_len=64, num_samples=scaled(2048, 256)),
        loader=LoaderConfig(batch_size=scaled(64, 16)),
    )
