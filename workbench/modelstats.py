"""What a compressed model costs and how well it still works: serialized size, accuracy on
held-out data (or the user's own evaluation function), output error against the float model, and
inference latency at several batch sizes measured side by side with the reference model.

    from workbench.modelstats import Subject, latencies
    subject = Subject.from_config(RunConfig.smoke())
    print(subject.evaluate(model), latencies({"dense": m1, "int8": m2}, subject, (1, 64)))
"""
from __future__ import annotations

import io
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch
from torch import nn

from .config import ConfigError, RunConfig
from .data import DataBundle, build_data
from .timing import interleaved


@dataclass
class Subject:
    """A model to compress and how to judge it. `evaluate(model) -> float` (higher is better,
    accuracy for the built-in data); `input_shape`, `task` and `vocab` make random inputs."""

    model: nn.Module
    input_shape: tuple
    task: str = "classify"
    vocab: int = 0
    data: Optional[DataBundle] = None
    eval_fn: Optional[Callable[[nn.Module], float]] = None
    name: str = "model"

    @classmethod
    def from_config(cls, cfg: RunConfig, model: nn.Module | None = None,
                    eval_fn: Callable | str | None = None) -> "Subject":
        """The config's model (built fresh, or `model`) and data; `eval_fn` may be an import path
        'package.module:fn' or 'file.py:fn' of a function model -> score."""
        from .models import build_model, load_factory

        data = build_data(cfg)
        if model is None:
            model = build_model(cfg, data)
        if isinstance(eval_fn, str):
            eval_fn = load_factory(eval_fn)
        return cls(model.eval(), tuple(data.input_shape), data.task, data.num_classes, data, eval_fn,
                   cfg.model.name.rsplit(":", 1)[-1])

    @classmethod
    def from_run(cls, run_dir: str | Path, eval_fn: Callable | str | None = None) -> "Subject":
        """The trained weights saved in a run folder."""
        from .runstore import load_config, load_model

        return cls.from_config(load_config(run_dir), load_model(run_dir), eval_fn)

    def example(self, batch: int, seed: int = 0) -> torch.Tensor:
        """Random inputs (never zeros: some kernels skip work on zeros)."""
        g = torch.Generator().manual_seed(seed)
        if self.task == "lm":
            return torch.randint(0, self.vocab, (batch, *self.input_shape), generator=g)
        return torch.rand(batch, *self.input_shape, generator=g)

    def evaluate(self, model: nn.Module) -> float | None:
        if self.eval_fn is not None:
            score = self.eval_fn(model)
            if isinstance(score, bool) or not isinstance(score, (int, float)):
                raise ConfigError(f"the evaluation function must return a number, got {score!r}")
            return float(score)
        if self.data is None:
            return None
        return accuracy(model, self.data)


@torch.no_grad()
def accuracy(model: nn.Module, data: DataBundle, batch: int = 512) -> float:
    """Top-1 accuracy on the held-out split (per token for a language model)."""
    model.eval()
    x_all, y_all = data.test.x, data.test.y
    correct = 0
    for i in range(0, len(x_all), batch):
        pred = model(x_all[i:i + batch]).argmax(-1)
        correct += (pred == y_all[i:i + batch]).sum().item()
    return correct / y_all.numel()


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
