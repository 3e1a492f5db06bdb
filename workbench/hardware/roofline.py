"""Where each built-in model's training step lands on this device's roofline: its arithmetic
intensity (FLOPs per byte moved) and the FLOP/s it reaches, under the measured ceilings.

A few training steps run in-process (inference-sized work, seconds), timed with
workbench.measure.timer.measure at the thread rule's threads (one where this process's threads
would spin beside busy programs: a collapsed step is no point on a roofline); FLOPs come from
workbench.train.flops. Each point says its threads.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..config import RunConfig
from ..measure.timer import measure
from ..train.data import build_data
from ..train.flops import first_batch, step_cost
from ..train.models import build_model, loss_fn
from ..train.precision import autocast


def builtin_configs(dtype: str = "fp32", batch_size: int = 64) -> dict[str, RunConfig]:
    """One config per built-in model, sized like the notebooks' defaults. The MLP sees synthetic
    1x8x8 images, the digits' shape, so timing it needs no dataset import."""
    base = RunConfig.default().replace(**{"precision.dtype": dtype, "loader.batch_size": batch_size})
    return {
        "mlp": base.replace(
            **{
                "data.name": "synthetic_images",
                "data.image_size": 8,
                "data.channels": 1,
                "data.num_samples": 256,
            }
        ),
        "cnn": base.replace(
            **{
                "model.name": "cnn",
                "model.width": 32,
                "data.name": "synthetic_images",
                "data.num_samples": 256,
            }
        ),
        "transformer": base.replace(
            **{
                "model.name": "transformer",
                "model.width": 128,
                "model.depth": 2,
                "data.name": "text",
                "data.num_samples": 256,
            }
        ),
    }


def model_point(cfg: RunConfig, device="cpu", repeats: int = 5) -> dict:
    """Count and time one training step of `cfg` (forward, backward, optimizer) on `device`."""
    device = torch.device(device)
    torch.manual_seed(cfg.run.seed)
    data = build_data(cfg)
    model = build_model(cfg, data).to(device)
    cost = step_cost(cfg, model, data, device)
    x, y = first_batch(data.train, cfg.loader.batch_size, device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr)
    lossf, amp = loss_fn(data.task), autocast(cfg, device)

    def step():
        with amp:
            loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    from .size_curve import rule_threads

    with rule_threads(cfg.run.threads or None) as threads:
        t = measure(step, device=device, warmup=2, repeats=repeats)
    return {
        "model": cfg.model.name,
        "dtype": cfg.precision.dtype,
        "batch_size": cost.batch_size,
        "flops": cost.flops,
        "bytes": cost.bytes_moved,
        "intensity": cost.intensity,
        "step_ms": t.median_ms,
        "spread": t.spread,
        "gflops": cost.flops / t.median_ms / 1e6,
        "params": cost.params,
        "threads": threads,
    }


def roofline_points(
    device="cpu",
    dtype: str = "fp32",
    repeats: int = 5,
    batch_size: int = 64,
    progress: Callable[[int, int, str], None] | None = None,
) -> list[dict]:
    configs = builtin_configs(dtype, batch_size)
    out = []
    for i, (name, cfg) in enumerate(configs.items()):
        if progress:
            progress(i, len(configs), f"train step {name}")
        out.append(model_point(cfg, device, repeats))
    if progress:
        progress(len(configs), len(configs), "done")
    return out


def attainable(intensity: float, peak_gflops: float, bandwidth_gbs: float) -> float:
    """The roofline: a kernel of this intensity can reach at most this many GFLOP/s."""
    return min(peak_gflops, bandwidth_gbs * intensity)
