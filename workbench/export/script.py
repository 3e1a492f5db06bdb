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

from .. import procs as wb_procs
from .. import config as wb_config
from .. import runfolder as wb_runfolder
from ..config import ConfigError, RunConfig
from ..events import STEP_NUMBER
from ..machine import allocator as wb_allocator
from ..machine import capability as wb_capability
from ..machine import contention as wb_contention
from ..machine import cpu as wb_cpu
from ..machine import threads as wb_threads
from ..measure import warmup as wb_warmup
from ..train import budget as wb_budget
from ..train import activation_checkpointing as wb_checkpointing
from ..train import data as wb_data
from ..train import loop as wb_loop
from ..train import models as wb_models
from ..train import precision as wb_precision
from ..train import rank as wb_rank
from ..train import resume as wb_resume
from ..train import state_index as wb_state_index
from ..train import sharding as wb_sharding
from ..train import step as wb_step
from ..train import thread_trial as wb_thread_trial
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
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager, nullcontext
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

# The run's settings (config.json next to this file holds the same, for the workbench).
CONFIG = {config}


def settings(config):
    """Attribute access to the config sections: cfg.loader.batch_size."""
    return SimpleNamespace(**{{name: SimpleNamespace(**section) for name, section in config.items()}})


RunConfig = SimpleNamespace  # what the copied code's annotations call the config: settings(CONFIG)


class ConfigError(ValueError):
    """A setting, the user's code or a saved state does not fit (the workbench's error, by name)."""

{threads}
{allocator}
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler
from torch.utils.data import default_collate
from torch.utils.data.distributed import DistributedSampler

HERE = Path(__file__).resolve().parent
'''

BUILD_MODEL = {
    "mlp": "return MLP(math.prod(data.input_shape), data.num_classes, m.width, m.depth)",
    "cnn": "c, h, _ = data.input_shape\n    return SmallCNN(c, data.num_classes, m.width, m.depth, "
    "image_size=h)",
    "transformer": "return TinyTransformerLM(data.num_classes, data.input_shape[0], m.width, m.depth, "
    "m.heads)",
    "user": BUILD_USER_MODEL,
}
MODEL_CLASSES = {
    "mlp": [wb_models.MLP],
    "cnn": [wb_models.SmallCNN],
    "transformer": [wb_models.TinyTransformerLM],
    "user": [],
}

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
    parts = [_source(wb_data.TensorBatches, wb_data.SampleBatches, wb_data.DataBundle)]
    if name == "digits":
        parts.append(DIGITS.format(data_file=DATA_FILE).strip())
    elif name == "synthetic_images":
        parts.append(_source(wb_data._split, wb_data.synthetic_images))
    elif name == "text":  # a corpus from a small grammar, made with the stdlib's random
        consts = "\n".join(
            f"{n} = {getattr(wb_data, n)!r}" for n in ("_SUBJECTS", "_VERBS", "_OBJECTS", "_ENDS")
        )
        parts.append(consts + "\n\n\n" + _source(wb_data.synthetic_corpus, wb_data._split, wb_data.text))
    elif name == "dataset":
        parts.append(dataset_code())
    else:
        raise ConfigError(f"data.name {name!r} cannot be exported")
    builder = BUILDER_NAMES.get(name, name)
    parts.append(
        f"def build_data(cfg):\n    bundle = {builder}(cfg)\n    bundle.name = {name!r}\n    return bundle"
    )
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
    return "\n\n\n".join(
        [
            dtypes,
            _source(wb_precision.autocast, wb_precision.grad_scaler, wb_models.loss_fn),
            _source(wb_capability.resolve_device, wb_rank.pick_device, wb_precision.apply_backend_flags),
            _source(
                wb_data.make_loader,
                wb_rank.backend_for,
                wb_rank.unwrap,
                wb_trainer.evaluate,
                wb_trainer.full_state,
                wb_budget.TimeBudget,
                wb_warmup.warmup_steps,
            ),
            f"MIN_TIMED = {wb_thread_trial.MIN_TIMED!r}\n\n\n" + _source(wb_thread_trial.ThreadTrial),
            "_NEVER_FREED: list = []  # what leave_group keeps alive",
            _source(wb_rank.leave_group, wb_procs.leave),
        ]
    )


THREADS = '''
# ---- threads and wait policy: the workbench's own rule, chosen before torch loads -----------------
# OpenMP reads its wait policy once, when torch is imported: so the choice is made here, as the
# workbench's launcher makes it before a rank starts, and said when training starts.
{constants}


{rule}


cpu = SimpleNamespace(usable_cores=usable_cores)  # the rule asks cpu.usable_cores(), as in the workbench
RECORDED = {recorded}  # what the workbench run this came from chose (None: exported from a config)


def tree_cpu_s(root):
    """CPU seconds of `root` and its descendants, from /proc: this run's own work (under torchrun,
    its agent and every rank)."""
    children, spent = {{}}, {{}}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{{entry}}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces
        children.setdefault(int(fields[1]), []).append(int(entry))
        spent[int(entry)] = sum(int(v) for v in fields[11:15]) / _TICK  # its and its reaped children's
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += spent.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


def other_cores_now(seconds=READ_S):
    """Cores other programs held over `seconds` (the machine's CPU time less this run's), or None
    where /proc cannot be read."""
    root = os.getppid() if "TORCHELASTIC_RUN_ID" in os.environ else os.getpid()
    busy0, _, total0 = system_cpu()
    if not total0:
        return None
    own0, t0 = tree_cpu_s(root), time.monotonic()
    time.sleep(seconds)
    busy1, _, _ = system_cpu()
    return max(0.0, (busy1 - busy0 - (tree_cpu_s(root) - own0)) / (time.monotonic() - t0))


def threads_now(cfg):
    """The rule on this machine now, for the ranks as launched; the run's recorded choice where the
    machine cannot be read. The wait policy and thread trial go into the environment, as the
    launcher puts them into a rank's."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    cfg.distributed.nproc = local
    cfg.distributed.nnodes = max(1, int(os.environ.get("WORLD_SIZE", local)) // local)
    other = other_cores_now()
    if other is None and RECORDED:
        choice = ThreadChoice(**{{**RECORDED, "trial": tuple(RECORDED.get("trial") or ())}})
    else:
        choice = choose_threads(cfg, other or 0.0)
    for name, value in choice.env().items():
        os.environ.setdefault(name, value)
    return choice


# run as a script: chosen now, before torch loads; imported as a module, train() chooses (too late
# for the wait policy, and without touching the importer's environment)
CHOSEN = threads_now(settings(CONFIG)) if __name__ == "__main__" else None
'''


ALLOCATOR = '''
# ---- memory allocator: the workbench's own rule, applied before torch loads ----------------------
# LD_PRELOAD is read only when a process starts: where the run's allocator (run.allocator) is
# tcmalloc and this process runs without it, the script starts itself again with it, once.
import functools
import sysconfig

{constants}


{rule}


def start_with_allocator(choice):
    env = allocator_env(choice)
    if env and allocator_in_use() != "tcmalloc" and not os.environ.get("WORKBENCH_ALLOCATOR_SET"):
        os.environ.update(env, WORKBENCH_ALLOCATOR_SET="1")  # once: a preload that fails is not retried
        os.execv(sys.executable, getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    return allocator_in_use()


# run as a script: restarted with it now, before torch loads; imported as a module: as it is
ALLOCATOR_IN_USE = start_with_allocator(CONFIG["run"]["allocator"]) if __name__ == "__main__" else None
'''


def _allocator_code() -> str:
    """machine.allocator's rule, copied, for the script's header."""
    a = wb_allocator
    constants = "\n".join(
        f"{name} = {value!r}" for name, value in (("TCMALLOC_FILES", a.TCMALLOC_FILES), ("QUIET", a.QUIET))
    )
    rule = _source(a.tcmalloc_path, a.resolved, a.allocator_env, a.allocator_in_use)
    return ALLOCATOR.format(constants=constants, rule=rule)


def _threads_code(recorded: dict | None) -> str:
    """machine.threads' rule and what it reads, copied, for the script's header."""
    t, c = wb_threads, wb_contention
    constants = "\n".join(
        f"{name} = {value!r}"
        for name, value in (
            ("THREADS_ENV", t.THREADS_ENV),
            ("WAIT_ENV", t.WAIT_ENV),
            ("TRIAL_ENV", t.TRIAL_ENV),
            ("TRIAL_WHY", t.TRIAL_WHY),
            ("READ_S", t.READ_S),
            ("BUSY_CORES", c.BUSY_CORES),
        )
    )
    constants += '\n_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100'
    rule = _source(
        c.system_cpu,
        wb_cpu.usable_cores,
        t.thread_count,
        t.auto_source,
        t.ThreadChoice,
        t.wait_policy,
        t.waits_passively,
        t.choose_threads,
    )
    return THREADS.format(constants=constants, rule=rule, recorded=pprint.pformat(recorded))


CHECKPOINTING = '''import fnmatch

from torch.utils.checkpoint import checkpoint


SHOWN = {shown}'''


# What the main calls for a setting the export left out: one line, not a NameError, if config.json
# is edited to ask for it.
NOT_EXPORTED = """def {name}(*args, **kwargs):
    raise ConfigError(
        "config.json asks for {field}, which this script was exported without: "
        "export it again from a config that sets it"
    )"""


def _checkpoint_code() -> str:
    """train.checkpoint's own code, copied: the same modules are recomputed in the script."""
    c = wb_checkpointing
    return "\n\n\n".join(
        [
            CHECKPOINTING.format(shown=c.SHOWN),
            _source(
                c._matches, c.module_names, c._listing, c.resolve, c._checkpointed, c.apply_checkpointing
            ),
        ]
    )


def _sharding_code() -> str:
    """distributed.strategy 'fsdp': the trainer's own FSDP2 wrapping, copied, with the dtypes its
    mixed precision names."""
    dtypes = f"COMPUTE_DTYPE = {wb_sharding.COMPUTE_DTYPE}\nREDUCE_DTYPE = {wb_sharding.REDUCE_DTYPE}\n\n\n"
    return dtypes + _source(
        wb_sharding.layer_blocks, wb_sharding.block_names, wb_sharding.check_shardable, wb_sharding.apply_fsdp
    )


def _step_code() -> str:
    """The trainer's own step, optimizer, batch cycle and loop, copied: one loop, not two; the
    script attaches its own hooks (its printed lines and metrics) and the thread trial's."""
    impls = f"OPTIMIZER_IMPLS = {wb_step.OPTIMIZER_IMPLS!r}"
    return "\n\n\n".join(
        [
            impls,
            _source(
                wb_step.make_optimizer,
                wb_step.cycle_batches,
                wb_step.no_phase,
                wb_step.StepPart,
                wb_step.marked,
                wb_step.StepParts,
                wb_step.train_step,
                wb_loop.StepResult,
                wb_loop.Hook,
                wb_loop.run_loop,
                wb_thread_trial.TrialSteps,
            ),
        ]
    )


RESUME_IMPORTS = """import hashlib
import json
import shutil
import warnings
from pathlib import Path

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import CheckpointException, FileSystemReader
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict"""


def _resume_code() -> str:
    """run.save_every's resumable state, the trainer's own format and folder: a script and a
    workbench run each go on from what the other saved, under any strategy and rank count."""
    r, f = wb_resume, wb_runfolder
    names = "\n".join(
        f"{name} = {value!r}"
        for name, value in [
            ("STEP_NUMBER", STEP_NUMBER),
            ("THREADS", r.THREADS),
            ("RESUME", f.RESUME),
            ("SAVED_STEP", f.SAVED_STEP),
            ("SAVING", f.SAVING),
            ("STATE_INDEX", f.STATE_INDEX),
            ("CHUNK", wb_state_index.CHUNK),
        ]
    )
    code = _source(
        wb_config.error_line,
        f.saved_steps,
        r.state_of,
        r._rank,
        r._cause,
        r._checkpoint,
        wb_state_index._sha256,
        wb_state_index.write_index,
        wb_state_index.check_index,
        wb_state_index.check_whole,
        wb_state_index.check_state,
        wb_state_index.refuse_nothing_to_train,
        r.save_state,
        r.load_state,
    )
    return "\n\n\n".join([RESUME_IMPORTS, names, code])


def script_config(cfg: RunConfig, specs: dict | None = None) -> dict:
    """The settings embedded in the script; the user's code is named as the export carries it."""
    config = cfg.to_dict()
    for field, spec in (specs or {}).items():
        section, key = field.split(".")
        config[section][key] = spec
    return config


def script_source(cfg: RunConfig, specs: dict | None = None, recorded: dict | None = None) -> str:
    """The whole train.py for this config, as text; `recorded`: the threads the run chose."""
    extra = "" if not uses_user_code(cfg) else " and your code (copied next to it)"
    header = HEADER.format(
        label=cfg.run.label or f"{cfg.model.name}, {cfg.data.name}",
        extra_dep=extra,
        config=pprint.pformat(script_config(cfg, specs), indent=1, width=100),
        threads=_threads_code(recorded),
        allocator=_allocator_code(),
    )
    sections = [
        ("model", _model_code(cfg)),
        ("data", _data_code(cfg)),
        ("precision, loss and loading", _helpers_code()),
        ("one training step and the loop (the workbench's own)", _step_code()),
        ("resumable state (run.save_every)", _resume_code()),
    ]
    fsdp = cfg.distributed.strategy == "fsdp"
    title = "activation checkpointing (train.checkpoint)"
    if cfg.train.checkpoint or fsdp:  # FSDP's block names are matched as checkpointing's are
        sections.append((title, _checkpoint_code()))
    else:
        sections.append(
            (f"{title}: not exported", NOT_EXPORTED.format(name="apply_checkpointing", field=title))
        )
    title = "sharding: FSDP2 per block, then the root (distributed.strategy)"
    if fsdp:
        sections.append((title, _sharding_code()))
    else:
        field = "distributed.strategy 'fsdp'"
        sections.append((f"{title}: not exported", NOT_EXPORTED.format(name="apply_fsdp", field=field)))
    body = "".join(f"\n\n# ---- {title} {'-' * (92 - len(title))}\n{code}\n" for title, code in sections)
    return header + body + MAIN


def save_digits(cfg: RunConfig, path: Path) -> None:
    """The digits split exactly as the workbench makes it, as plain tensors (no scikit-learn needed)."""
    bundle = wb_data.build_data(cfg)
    torch.save(
        {
            "train_x": bundle.train.x.contiguous(),
            "train_y": bundle.train.y.contiguous(),
            "test_x": bundle.test.x.contiguous(),
            "test_y": bundle.test.y.contiguous(),
        },
        path,
    )
