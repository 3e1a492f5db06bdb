"""What a compressed model costs: serialized size, output error against the float model, and
inference latency at several batch sizes measured side by side with the reference model.

    from workbench.compress.stats import latencies
    latencies({"dense": m1, "int8": m2}, subject, (1, 64))
"""
from __future__ import annotations

import io
from contextlib import contextmanager

import torch
from torch import nn

from ..measure.timer import interleaved
from .subject import Subject


def state_size_bytes(model: nn.Module) -> int:
    """Bytes of the serialized state dict: what saving the model costs on disk."""
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return buf.tell()


@torch.no_grad()
def output_error(reference: nn.Module, model: nn.Module, x: torch.Tensor) -> float:
    """Largest absolute output difference relative to the reference's output range."""
    ref, out = reference(x).float(), model(x).float()
    return float((out - ref).abs().max() / ref.abs().max().clamp(min=1e-12))


def latencies(models: dict[str, nn.Module], subject: Subject, batch_sizes=(1, 64), rounds: int = 15,
              warmup: int = 3, threads: int | None = 1) -> dict[str, dict]:
    """Per model and batch size: median/p10/p90 ms, timed interleaved (A B C A B C ...) so the
    ratios between models are fair on a busy machine. The first model is the reference.

    `threads=1` by default: on a shared CPU, multi-threaded int8 kernels wait for busy cores and
    swing by 100x; one thread gives steady ratios. None keeps torch's setting."""
    out: dict[str, dict] = {name: {} for name in models}
    with num_threads(threads):
        _time_all(models, subject, batch_sizes, rounds, warmup, out)
    return out


@contextmanager
def num_threads(n: int | None):
    """torch's intra-op thread count set to `n` for a block (None: unchanged)."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _time_all(models, subject, batch_sizes, rounds, warmup, out) -> None:
    with torch.inference_mode():
        for batch in batch_sizes:
            x = subject.example(batch)
            inner = 5 if batch <= 8 else 1  # tiny calls: average a few per sample
            fns = {name: (lambda m=m: m(x)) for name, m in models.items()}
            times = interleaved(fns, warmup=warmup, rounds=rounds, inner=inner)
            ref = times[next(iter(models))].median_ms
            for name, t in times.items():
                out[name].update({f"latency_b{batch}_ms": t.median_ms,
                                  f"latency_b{batch}_p10_ms": t.p10_ms,
                                  f"latency_b{batch}_p90_ms": t.p90_ms,
                                  f"speedup_b{batch}": round(ref / t.median_ms, 3)})
