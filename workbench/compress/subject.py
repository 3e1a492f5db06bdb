"""The model to compress and how to judge it: its input shape, dtype and task (for random inputs),
its data, and a score (accuracy on the held-out split, or the user's own evaluation function).

    from workbench.compress.subject import Subject
    subject = Subject.from_config(RunConfig.smoke()); subject.evaluate(model)

Any data a run can train on works here, a user's Dataset too: the held-out split is read batch by
batch (`workbench.train.data.iter_batches`). The model's output goes through the contract's
adapter (a tuple's first element, a Hugging Face output's .logits), fitted on one example batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch
from torch import nn

from ..config import ConfigError, RunConfig
from ..runstore import load_config
from ..train.contract import fit_output
from ..train.data import DataBundle, build_data, iter_batches, sample_batch
from ..train.factory import load_factory
from ..train.models import build_model
from ..train.restore import load_model


CHANCE_FACTOR = 1.5  # a classifier this close to guessing has not learned what pruning could lose


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
    input_dtype: torch.dtype = torch.float32
    trained: bool = True  # False: a fresh model nobody trained, whose accuracy means nothing

    def __post_init__(self):
        fit_output(self.model, self.example(2))  # the model returns its logits from now on

    @classmethod
    def from_config(
        cls, cfg: RunConfig, model: nn.Module | None = None, eval_fn: Callable | str | None = None
    ) -> "Subject":
        """The config's model (built fresh, or `model`) and data; `eval_fn` may be an import path
        'package.module:fn' or 'file.py:fn' of a function model -> score."""
        data = build_data(cfg)
        if model is None:
            model = build_model(cfg, data)
        if isinstance(eval_fn, str):
            eval_fn = load_factory(eval_fn, field="--eval")
        x, _ = sample_batch(data.train, 1)
        return cls(
            model.eval(),
            tuple(data.input_shape),
            data.task,
            data.num_classes,
            data,
            eval_fn,
            cfg.model.name.rsplit(":", 1)[-1],
            x.dtype,
        )

    @classmethod
    def from_run(
        cls, run_dir: str | Path, eval_fn: Callable | str | None = None, trust_code: bool = False
    ) -> "Subject":
        """The trained weights saved in a run folder (its own factories run only when the folder
        is trusted or `trust_code`: workbench.train.trust)."""
        return cls.from_config(load_config(run_dir), load_model(run_dir, trust_code), eval_fn)

    def example(self, batch: int, seed: int = 0) -> torch.Tensor:
        """Random inputs (never zeros: some kernels skip work on zeros)."""
        g = torch.Generator().manual_seed(seed)
        if self.task == "lm" or not self.input_dtype.is_floating_point:
            return torch.randint(
                0,
                max(self.vocab, 2),
                (batch, *self.input_shape),
                generator=g,
                dtype=self.input_dtype if self.task != "lm" else torch.long,
            )
        return torch.rand(batch, *self.input_shape, generator=g, dtype=self.input_dtype)

    def not_learned(self) -> str:
        """'this model has not learned: accuracy 0.10 with 10 classes ...' when a classifier's held-out
        accuracy is at most CHANCE_FACTOR x chance (1 / classes); '' otherwise, and when there is
        no accuracy to read (a score of the user's own, no data, another task)."""
        if self.eval_fn is not None or self.data is None or self.task != "classify" or self.vocab < 2:
            return ""
        acc, chance = self.evaluate(self.model), 1 / self.vocab
        if acc > CHANCE_FACTOR * chance:
            return ""
        return (
            f"this model has not learned: accuracy {acc:.2f} with {self.vocab} classes (chance is "
            f"{chance:.2f}), so what compression does to its accuracy means nothing; train it first"
        )

    def accuracy_note(self) -> str:
        """What its accuracy figures are worth, in one line ('' when they mean something): a model
        whose accuracy sits near chance, or one nobody trained. Every compression and inference
        result says it: text, table and JSON."""
        if self.not_learned():
            return self.not_learned()
        if self.trained or self.eval_fn is not None:
            return ""
        return (
            "accuracy is not meaningful: the model is untrained (--train-epochs 0); "
            "use --run-dir or --train-epochs N"
        )

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
    correct = count = 0
    for x, y in iter_batches(data.test, batch):
        correct += (model(x).argmax(-1) == y).sum().item()
        count += y.numel()
    return correct / count if count else 0.0
