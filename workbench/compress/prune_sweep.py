"""The pruning ratio sweep: for each amount, prune a copy of the model, score it, optionally
fine-tune it briefly in-process, make the pruning real, and time it side by side with the dense
model at batch 1 and a large batch. One plain record per amount, with its coverage (the share of
the model's weights the pruning touched; `details` lists the layers pruned and those left, with
why) and sparsity over the pruned layers and over the whole model (`model_sparsity`). The
amount-0 row is the same model timed against itself: the noise floor of the sweep.

    from workbench.compress.prune_sweep import SweepConfig, run_sweep
    df = run_sweep(subject, SweepConfig(amounts=[0, 0.5, 0.9], finetune_epochs=2))
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
from torch import nn

from ..config import ConfigError
from ..measure.verdict import FASTER, SLOWER
from ..train.models import loss_fn
from ..train.data import iter_batches
from .coverage import columns
from .unstructured import (
    METHODS,
    SCOPES,
    check_amount,
    check_not_quantized,
    magnitude_prune,
    make_real,
    copy_model,
    pruning_coverage,
    refresh_masks,
)
from .unstructured import sparsity as sparsity_of
from .reasons import judge
from .stats import latencies, num_threads, speedup_short, state_size_bytes
from .structured import structured_coverage, structured_prune
from .subject import Subject

SWEEP_METHODS = METHODS + ("structured",)


@dataclass
class SweepConfig:
    amounts: list = field(default_factory=lambda: [0.0, 0.3, 0.5, 0.7, 0.9])
    method: str = "magnitude"  # magnitude | random | structured
    scope: str = "global"  # layer | global (unstructured only)
    finetune_epochs: int = 0
    lr: float = 1e-3
    batch_sizes: tuple = (1, 64)
    rounds: int = 15  # interleaved timing rounds per point
    seed: int = 0

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        if not isinstance(self.amounts, (list, tuple)) or not self.amounts:
            raise ConfigError(f"sweep.amounts must be a non-empty list, got {self.amounts!r}")
        for a in self.amounts:
            if isinstance(a, bool) or not isinstance(a, float) and not isinstance(a, int):
                raise ConfigError(f"sweep.amounts entries must be fractions in [0, 1], got {a!r}")
            if not (math.isfinite(a) and 0 <= a <= 1) or (isinstance(a, int) and a not in (0, 1)):
                raise ConfigError(f"sweep.amounts entries must be fractions in [0, 1], got {a!r}")
        if self.method not in SWEEP_METHODS:
            raise ConfigError(f"sweep.method must be one of {', '.join(SWEEP_METHODS)}, got {self.method!r}")
        if self.scope not in SCOPES:
            raise ConfigError(f"sweep.scope must be one of {', '.join(SCOPES)}, got {self.scope!r}")
        for name, low in (("finetune_epochs", 0), ("rounds", 3)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ConfigError(f"sweep.{name} must be an integer >= {low}, got {v!r}")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not self.lr > 0:
            raise ConfigError(f"sweep.lr must be > 0, got {self.lr!r}")
        if not self.batch_sizes or any(
            isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in self.batch_sizes
        ):
            raise ConfigError(f"sweep.batch_sizes must be integers >= 1, got {self.batch_sizes!r}")


def finetune(
    model: nn.Module,
    subject: Subject,
    epochs: int,
    lr: float = 1e-3,
    batch: int = 64,
    seed: int = 0,
    threads: int | None = 1,
) -> nn.Module:
    """A short in-process fine-tune on the training split (pruning masks stay applied), reading
    any data a run trains on, a user's Dataset too.

    One thread by default: on a busy 2-core machine, two threads were measured 3x slower."""
    check_not_quantized(model, "train")
    if subject.data is None:
        raise ConfigError(
            "fine-tuning needs training data: build the subject from a RunConfig "
            "(Subject.from_config or Subject.from_run)"
        )
    lossf = loss_fn(subject.task)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    train = subject.data.train
    g = torch.Generator().manual_seed(seed)
    model.train()
    with num_threads(threads):
        for _ in range(epochs):
            order = torch.randperm(len(train), generator=g)
            for x, y in iter_batches(train, batch, order, drop_last=True):
                opt.zero_grad(set_to_none=True)
                lossf(model(x), y).backward()
                opt.step()
    refresh_masks(model)
    return model.eval()


def prune_once(model: nn.Module, amount, scfg: SweepConfig, example=None) -> nn.Module:
    """A pruned copy: masks for magnitude/random, a physically smaller model for structured."""
    if scfg.method == "structured":
        return structured_prune(model, amount, example=example)
    return magnitude_prune(copy_model(model), amount, scope=scfg.scope, method=scfg.method, seed=scfg.seed)


def iter_sweep(subject: Subject, scfg: SweepConfig, stop: threading.Event | None = None) -> Iterator[dict]:
    """Yield one record per amount as soon as it is measured (the UI redraws between them)."""
    base = subject.model.eval()
    check_not_quantized(base, "prune")
    for a in scfg.amounts:
        check_amount(a, 1, "sweep.amounts entry")
    dense_stats = sparsity_of(base)
    dense_size = state_size_bytes(base)
    kind = "structured" if scfg.method == "structured" else "unstructured"
    example = subject.example(2)
    masked_cov = pruning_coverage(base) if kind == "unstructured" else None
    unreliable = ""  # said on every later row once the dense model timed against itself differed
    not_learned = subject.not_learned()  # said before the first point, and on every row
    dense_accuracy = subject.evaluate(base)
    for amount in scfg.amounts:
        if stop is not None and stop.is_set():
            return
        pruned = prune_once(base, amount, scfg, example)
        cov = masked_cov or structured_coverage(base, pruned)
        rec = {
            "amount": amount,
            "method": scfg.method,
            "scope": scfg.scope,
            "accuracy": subject.evaluate(pruned),
            "dense_accuracy": dense_accuracy,  # what a shown verdict is weighed against
        }
        if scfg.finetune_epochs:
            finetune(pruned, subject, scfg.finetune_epochs, scfg.lr, seed=scfg.seed)
            rec["accuracy_finetuned"] = subject.evaluate(pruned)
        if kind == "unstructured":
            make_real(pruned)
        stats = sparsity_of(pruned)
        removed = 1 - stats["params"] / dense_stats["params"]
        rec.update(
            stats,
            size_bytes=state_size_bytes(pruned),
            dense_size_bytes=dense_size,
            params_removed=round(removed, 4),
            **columns(cov),
        )
        times = latencies({"dense": base, "pruned": pruned}, subject, scfg.batch_sizes, scfg.rounds)
        rec.update(times["pruned"])
        rec.update({f"dense_{k}": v for k, v in times["dense"].items() if k.startswith("latency")})
        judged = judge(
            kind,
            times["pruned"],
            stats["sparsity"],
            cov,
            accuracy=(dense_accuracy, rec.get("accuracy_finetuned", rec["accuracy"])),
        )
        if amount == 0:  # the same model twice: an A/A, whose ratios are a noise floor, no verdict
            differed = [b for b in scfg.batch_sizes if rec.get(f"speedup_b{b}_verdict") in (FASTER, SLOWER)]
            if differed:
                unreliable = (
                    f"the dense model timed against itself read "
                    f"{rec[f'speedup_b{differed[0]}_verdict']} at batch {differed[0]}, so "
                    "this sweep's timing is unreliable: rerun it on a quieter machine"
                )
            for b in scfg.batch_sizes:
                rec[f"speedup_b{b}_verdict"] = "reference"
            floor = "; ".join(f"{speedup_short(times['pruned'], b)} at batch {b}" for b in scfg.batch_sizes)
            judged = {
                "verdict": "reference",
                "why": f"nothing pruned: the dense model timed against "
                f"itself, so these ratios are the sweep's timing noise floor, not a speedup: "
                f"{floor}",
            }
        if unreliable:
            judged = {**judged, "why": f"{unreliable}; {judged['why']}"}
        rec.update(judged, unreliable=unreliable, not_learned=not_learned, details=cov)
        yield rec


class _Asked:
    """A stop callable where iter_sweep takes an Event: is_set() asks it."""

    def __init__(self, stop: Callable[[], bool]):
        self.is_set = stop


def run_sweep(
    subject: Subject,
    scfg: SweepConfig,
    progress: Callable[[int, int, dict], None] | None = None,
    stop: Callable[[], bool] | None = None,
):
    """The whole sweep as a pandas DataFrame; `progress(done, total, record)` after each point;
    `stop()` True ends it before the next point, with the points measured so far."""
    import pandas as pd

    rows = []
    for rec in iter_sweep(subject, scfg, _Asked(stop) if stop else None):
        rows.append(rec)
        if progress:
            progress(len(rows), len(scfg.amounts), rec)
    return pd.DataFrame(rows)
