"""Write the standalone `train.py` for a config: plain torch, no workbench import.

The model classes, the data builders and the loader/precision helpers are copied from the package
as source (inspect.getsource), so the exported script cannot drift from what the workbench runs;
the digits data (which needs scikit-learn) is saved next to the script as plain tensors instead.
"""
from __future__ import annotations

import inspect
import pprint
from pathlib import Path

import torch

from .. import disk as wb_disk
from .. import procs as wb_procs
from ..config import ConfigError, RunConfig
from ..events import STEP_NUMBER
from ..runfolder import RESUME
from ..train import budget as wb_budget
from ..train import checkpointing as wb_checkpointing
from ..train import data as wb_data
from ..train import models as wb_models
from ..train import precision as wb_precision
from ..train import rank as wb_rank
from ..train import resume as wb_resume
from ..train import sharding as wb_sharding
from ..train import step as wb_step
from ..train import trainer as wb_trainer
from .template import MAIN
from .user_code import BUILD_USER_MODEL, dataset_code, user_code, uses_user_code

DATA_FILE = "data.pt"

HEADER = '''"""Standalone training script exported by the PyTorch optimization workbench ({label}).

It depends only on torch{extra_dep}. Same model, data, optimizer, precision, gradient accumulation
and DDP settings as the run it came from; with the same seed it reproduces that run's losses.

    python train.py                       # one process
    torchrun --nproc-per-node=2 train.py  # two ranks on this machine
    python train.py --steps 1000 --metrics metrics/   # longer, per-step losses to metrics/rank0.jsonl
    python train.py --save-every 50       # keep a resumable state in state/ ...
    python train.py --resume              # ... and go on from it after a crash

commands.md has the multi-node torchrun command; job.slurm runs it under SLURM.
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.util
import inspect
import io
import json
import math
import os
import random
import sys
import tempfile
import time
from contextlib import nullcontext
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler
from torch.utils.data import default_collate
from torch.utils.data.distributed import DistributedSampler

HERE = Path(__file__).resolve().parent

# The run's settings (config.json next to this file holds the same, for the workbench).
CONFIG = {config}


def settings(config):
    """Attribute access to the config sections: cfg.loader.batch_size."""
    return SimpleNamespace(**{{name: SimpleNamespace(**section) for name, section in config.items()}})
'''

BUILD_MODEL = {
    "mlp": "return MLP(math.prod(data.input_shape), data.num_classes, m.width, m.depth)",
    "cnn": "c, h, _ = data.input_shape\n    return SmallCNN(c, data.num_classes, m.width, m.depth, "
           "image_size=h)",
    "transformer": "return TinyTransformerLM(data.num_classes, data.input_shape[0], m.width, m.depth, "
                   "m.heads)",
    "user": BUILD_USER_MODEL,
}
MODEL_CLASSES = {"mlp": [wb_models.MLP], "cnn": [wb_models.SmallCNN],
                 "transformer": [wb_models.TinyTransformerLM], "user": []}

BUILDER_NAMES = {"dataset": "user_dataset"}

DIGITS = '''

def digits(cfg):
    """The scikit-learn digits as the run split them, saved next to this script as plain tensors."""
    t = torch.load(HERE / "{data_file}", weights_only=True)
    return DataBundle(TensorBatches(t["train_x"], t["train_y"]), TensorBatches(t["test_x"], t["test_y"]),
                      "classify", (1, 8, 8), 10)
'''


def _source(*objects) -> str:
    return "\n\n".join(inspect.getsource(o).rstrip() for o in objects)


def _data_code(cfg: RunConfig) -> str:
    name = cfg.data.name
    parts = [_source(wb_data.TensorBatches, wb_data.DataBundle)]
    if name == "digits":
        parts.append(DIGITS.format(data_file=DATA_FILE).strip())
    elif name == "synthetic_images":
        parts.append(_source(wb_data._split, wb_data.synthetic_images))
    elif name == "text":  # a corpus from a small grammar, made with the stdlib's random
        consts = "\n".join(f"{n} = {getattr(wb_data, n)!r}" for n in
                           ("_SUBJECTS", "_VERBS", "_OBJECTS", "_ENDS"))
        parts.append(consts + "\n\n\n" + _source(wb_data.synthetic_corpus, wb_data._split, wb_data.text))
    elif name == "dataset":
        parts.append(dataset_code())
    else:
        raise ConfigError(f"data.name {name!r} cannot be exported")
    builder = BUILDER_NAMES.get(name, name)
    parts.append(f"def build_data(cfg):\n    bundle = {builder}(cfg)\n    bundle.name = {name!r}\n"
                 "    return bundle")
    return "\n\n\n".join(parts)


def model_kind(cfg: RunConfig) -> str:
    return cfg.model.name if cfg.model.name in MODEL_CLASSES else "user"


def _model_code(cfg: RunConfig) -> str:
    kind = model_kind(cfg)
    parts = [_source(*MODEL_CLASSES[kind])] if MODEL_CLASSES[kind] else []
    if uses_user_code(cfg):
        parts.append(user_code(cfg))
    parts.append(f"def build_model(cfg, data):\n    m = cfg.model\n    {BUILD_MODEL[kind]}")
    return "\n\n\n".join(parts)


def _helpers_code() -> str:
    dtypes = "DTYPES = {'fp32': torch.float32, 'bf16': torch.bfloat16, 'fp16': torch.float16}"
    return "\n\n\n".join([
        dtypes, _source(wb_precision.autocast, wb_precision.grad_scaler, wb_models.loss_fn),
        _source(wb_data.make_loader, wb_rank.backend_for, wb_rank.unwrap, wb_trainer.evaluate,
                wb_trainer.full_state, wb_budget.TimeBudget),
        "_NEVER_FREED: list = []  # what leave_group keeps alive",
        _source(wb_rank.leave_group, wb_procs.leave)])


CHECKPOINTING = '''import fnmatch

from torch.utils.checkpoint import checkpoint


class ConfigError(ValueError):
    """A setting that does not fit the model."""


SHOWN = {shown}'''


def _checkpoint_code() -> str:
    """train.checkpoint's own code, copied: the same modules are recomputed in the script."""
    c = wb_checkpointing
    return "\n\n\n".join([CHECKPOINTING.format(shown=c.SHOWN), _source(
        c._matches, c.module_names, c._listing, c.resolve, c._checkpointed, c.apply_checkpointing)])


def _sharding_code() -> str:
    """distributed.strategy 'fsdp': the trainer's own FSDP2 wrapping, copied."""
    return _source(wb_sharding.layer_blocks, wb_sharding.block_names, wb_sharding.apply_fsdp)


def _step_code() -> str:
    """The trainer's own step, optimizer and batch cycle, copied: one loop, not two."""
    impls = f"OPTIMIZER_IMPLS = {wb_step.OPTIMIZER_IMPLS!r}"
    return "\n\n\n".join([impls, _source(wb_step.make_optimizer, wb_step.cycle_batches,
                                          wb_step.no_phase, wb_step.StepParts,
                                          wb_step.train_step)])


def _resume_code() -> str:
    """run.save_every's resumable state, the trainer's own file: a script and a workbench run each
    go on from the other's `resume.pt` (one process or DDP)."""
    names = f"STEP_NUMBER = {STEP_NUMBER!r}\nRESUME = {RESUME!r}"
    return "\n\n\n".join([names, _source(wb_resume.whole_state, wb_resume.load_whole_state,
                                           wb_disk.write_atomic)])


def script_config(cfg: RunConfig, specs: dict | None = None) -> dict:
    """The settings embedded in the script; the user's code is named as the export carries it."""
    config = cfg.to_dict()
    for field, spec in (specs or {}).items():
        section, key = field.split(".")
        config[section][key] = spec
    return config


def script_source(cfg: RunConfig, specs: dict | None = None) -> str:
    """The whole train.py for this config, as text."""
    extra = "" if not uses_user_code(cfg) else " and your code (copied next to it)"
    header = HEADER.format(label=cfg.run.label or f"{cfg.model.name}, {cfg.data.name}",
                           extra_dep=extra,
                           config=pprint.pformat(script_config(cfg, specs), indent=1, width=100))
    sections = [("model", _model_code(cfg)), ("data", _data_code(cfg)),
                ("precision, loss and loading", _helpers_code()),
                ("one training step (the workbench's own)", _step_code()),
                ("resumable state (run.save_every)", _resume_code())]
    fsdp = cfg.distributed.strategy == "fsdp"
    if cfg.train.checkpoint or fsdp:  # FSDP's block names are matched as checkpointing's are
        sections.append(("activation checkpointing (train.checkpoint)", _checkpoint_code()))
    if fsdp:
        sections.append(("sharding: FSDP2 per block, then the root (distributed.strategy)",
                         _sharding_code()))
    body = "".join(f"\n\n# ---- {title} {'-' * (92 - len(title))}\n{code}\n" for title, code in sections)
    return header + body + MAIN


def save_digits(cfg: RunConfig, path: Path) -> None:
    """The digits split exactly as the workbench makes it, as plain tensors (no scikit-learn needed)."""
    bundle = wb_data.build_data(cfg)
    torch.save({"train_x": bundle.train.x.contiguous(), "train_y": bundle.train.y.contiguous(),
                "test_x": bundle.test.x.contiguous(), "test_y": bundle.test.y.contiguous()}, path)


