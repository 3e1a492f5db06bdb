"""What a run needs against what this machine has, checked before launch: the ranks' threads and
the loader workers against the usable cores, the memory a rank holds against free RAM (or free GPU
memory), the batch against the data, and the disk the run will write against the free space there.

    need = prechecks.measure(cfg, new_process)   # a Launcher's Prechecks and check processes
    notes = check_limits(cfg, device, folder, need)

What cannot work is refused (ConfigError, one line with the numbers). What would only be slow
(more busy threads or workers than cores) is refused too unless the user says run.oversubscribe=true
(`workbench run --oversubscribe`); then it runs, and the note says what was overridden.

The need comes from workbench.train.precheck, run once per config in a short-lived child process
(the user's factory never runs in the kernel; a spare one, past its imports, where a run panel keeps
spares: workbench.distributed.warm), and is kept (by the launcher's Prechecks and in the user's
cache, prechecks/) for configs that name no code or name a file that has not changed since; what it is
compared with (free memory, free disk, cores) is read anew at every launch.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Callable

import torch

from ..config import ConfigError, RunConfig, shown
from ..cache import PRIVATE, cache_dir
from ..disk import Reserve, free_bytes, make_dirs, mib, write_json_atomic
from ..machine.cpu import memory_info
from ..machine.gpu import gpu_free_gib
from ..train.flops import StepCost, memory_need_gib
from ..machine.fit import core_limits, oversubscribed

GIB = 2**30
PRECHECK_TIMEOUT_S = 120.0
EVENT_BYTES = 400  # one step record, with room for memory fields
CUDA_CONTEXT_GIB = 1.0


def _cache_key(cfg: RunConfig) -> str | None:
    """What the precheck's answer depends on; None when it names code that may change unseen
    (a package module: looking at its file would mean importing its package here)."""
    d = cfg.to_dict()
    files = []
    for spec in (
        cfg.model.name if ":" in cfg.model.name else "",
        cfg.data.factory if cfg.data.name == "dataset" else "",
    ):
        target = spec.rpartition(":")[0]
        if not target:
            continue
        if not target.endswith(".py"):
            return None
        try:
            st = Path(target).resolve().stat()
        except OSError:
            return None
        files.append([str(Path(target).resolve()), st.st_mtime_ns, st.st_size])
    key = {k: d[k] for k in ("model", "data", "precision")}
    key.update(
        batch=d["loader"]["batch_size"],
        optim=d["optim"]["name"],
        cwd=os.getcwd(),
        files=files,
        checkpoint=d["train"]["checkpoint"],
        fsdp=d["distributed"]["fsdp_blocks"] if d["distributed"]["strategy"] == "fsdp" else None,
        python=sys.executable,
        torch=torch.__version__,
        host=socket.gethostname(),
    )
    return json.dumps(key, sort_keys=True)


def _stored(key: str) -> Path:
    """Where a measured answer is kept between processes (a repeated CLI launch skips the child)."""
    return cache_dir() / "prechecks" / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


class Prechecks:
    """The pre-launch check's answers, kept by what they depend on for a launcher's life (and on
    disk, in the user's cache)."""

    def __init__(self) -> None:
        self._answers: dict[str, dict] = {}

    def measure(
        self,
        cfg: RunConfig,
        new_process: Callable[[], subprocess.Popen],
        timeout_s: float = PRECHECK_TIMEOUT_S,
    ) -> dict:
        """Build the config's data and model in a child process (`new_process`: a spare one, past
        its imports, or a new one) and return what it measured; a config whose model or data
        cannot be built is a ConfigError with the child's one line."""
        key = _cache_key(cfg)
        keep = key is not None and cfg.data.name != "image_folder"  # a folder may change unseen
        if keep and key not in self._answers:
            try:
                self._answers[key] = json.loads(_stored(key).read_text())
            except (OSError, ValueError):
                pass
        if key is not None and key in self._answers:
            return self._answers[key]
        result = _measure(cfg, new_process(), timeout_s)
        if result.get("timed_out"):
            return result
        if key is not None:
            self._answers[key] = result
        if keep:
            try:
                make_dirs(_stored(key).parent, PRIVATE)
                write_json_atomic(_stored(key), result)
            except OSError:
                pass  # not kept: measured again next time
        return result


def _measure(cfg: RunConfig, proc: subprocess.Popen, timeout_s: float) -> dict:
    """Send the config to a check process and read its answer."""
    try:
        stdout, stderr = proc.communicate(cfg.to_json(), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {
            "ok": True,
            "timed_out": True,
            "note": f"the pre-launch check of the model and data took over {timeout_s:g} s and was "
            "stopped; memory was not checked",
        }
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if proc.returncode < 0:
        how = signal.Signals(-proc.returncode).name
        oom = (
            (" (most likely out of memory); make data.num_samples, data.image_size or the model smaller")
            if how == "SIGKILL"
            else ""
        )
        raise ConfigError(f"building the data and the model before launch was killed by {how}{oom}")
    if not lines:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"the pre-launch check of model.name {cfg.model.name!r} failed: {tail}")
    result = json.loads(lines[-1])
    if not result.get("ok"):
        raise ConfigError(result["error"])
    return result


def per_rank_batch(cfg: RunConfig, train_samples: int) -> int:
    """The batch each rank trains on, refused when the data cannot fill it (the loader would
    otherwise shrink it silently)."""
    ranks = cfg.distributed.world_size
    share = train_samples // ranks
    if cfg.loader.batch_size > share:
        raise ConfigError(
            f"loader.batch_size must be <= {share}, the training samples each of the "
            f"{ranks} rank(s) gets from data.name {cfg.data.name!r} ({train_samples} in "
            f"all), got {shown(cfg.loader.batch_size)}; use a smaller batch or more data"
        )
    return cfg.loader.batch_size


def memory_need(cfg: RunConfig, need: dict, device_type: str) -> dict:
    """GiB one rank holds: on the host (torch itself, the data, and on a CPU the training state)
    and on its GPU (the training state and the CUDA context)."""
    batch = per_rank_batch(cfg, need["train_samples"])
    cost = StepCost(
        flops=0,
        ops=0,
        params=need["params"],
        param_bytes=need["param_bytes"],
        activation_bytes=int(need.get("activation_bytes_per_sample", 0) * batch),
        batch_size=batch,
        optimizer=cfg.optim.name,
        accum=cfg.optim.grad_accum_steps,
    )
    on_gpu = device_type == "cuda"
    state = memory_need_gib(cost, context_gib=CUDA_CONTEXT_GIB if on_gpu else 0.0)
    ddp = need["params"] * 4 / GIB if cfg.distributed.world_size > 1 else 0.0  # gradient buckets
    host = need["base_rss_gib"] + need["data_rss_gib"] + (0.0 if on_gpu else state["total_gib"] + ddp)
    return {"host_gib": host, "gpu_gib": state["total_gib"] + ddp if on_gpu else 0.0, **state}


def check_cores(cfg: RunConfig) -> list[str]:
    """The one rule of what this machine's cores can run (workbench.machine.fit): refused, or a
    note when run.oversubscribe=true says to run it anyway."""
    limits = core_limits(cfg)
    if limits and not cfg.run.oversubscribe:
        raise ConfigError(oversubscribed(limits[0]))
    return [f"run.oversubscribe=true: running anyway: {text}" for text in limits]


def per_rank_gib(cfg: RunConfig, need: dict, device_type: str) -> float:
    """GiB one rank of cfg holds where memory is scarcest: its GPU's, else the host's."""
    m = memory_need(cfg, need, device_type)
    return m["gpu_gib"] if device_type == "cuda" else m["host_gib"]


def _available(cfg: RunConfig, device_type: str) -> tuple[float | None, int, float | None]:
    """(the GiB the scarcest memory has, the ranks that share it, the host RAM available): the
    fullest GPU's free memory and the ranks on it, else the available RAM and every rank."""
    nproc = cfg.distributed.nproc
    ram = memory_info().get("available_gib")
    if device_type == "cuda":
        free = gpu_free_gib()
        return (min(free), math.ceil(nproc / len(free)), ram) if free else (None, 1, ram)
    return ram, nproc, ram


def available_per_rank(cfg: RunConfig, device_type: str) -> tuple[float | None, str]:
    """GiB one rank of cfg may hold here, as the pre-launch check reads it, and where it comes from
    (None: no reading)."""
    whole, ranks, _ = _available(cfg, device_type)
    if whole is None:
        return None, f"no reading of the {'GPU' if device_type == 'cuda' else 'RAM'} available"
    where = "the fullest GPU's free memory" if device_type == "cuda" else "the RAM available"
    return whole / ranks, f"{where}, {whole:.3g} GiB, shared by {ranks} rank(s)"


def check_memory(cfg: RunConfig, need: dict, device_type: str) -> list[str]:
    m = memory_need(cfg, need, device_type)
    nproc = cfg.distributed.nproc
    parts = f"torch {need['base_rss_gib']:.2f} + data {need['data_rss_gib']:.2f}" + (
        ""
        if device_type == "cuda"
        else " + weights, gradients and optimizer state "
        f"{m['weights_gib'] + m['grads_gib'] + m['optimizer_gib']:.3g}"
        f" + activations {m['activations_gib']:.3g}"
    )
    worst, per_gpu, available = _available(cfg, device_type)
    if available is not None and nproc * m["host_gib"] > available:
        raise ConfigError(
            f"this run needs about {nproc * m['host_gib']:.3g} GiB of RAM ({nproc} rank(s) x "
            f"({parts}) GiB) and this machine has {available:.3g} GiB available; use "
            "fewer ranks (distributed.nproc), a smaller model or a smaller batch"
        )
    notes = []
    if device_type == "cuda":
        if worst is not None:
            if per_gpu * m["gpu_gib"] > worst:
                raise ConfigError(
                    f"each rank needs about {m['gpu_gib']:.3g} GiB of GPU memory (weights, "
                    f"gradients, optimizer state, activations and {CUDA_CONTEXT_GIB:g} GiB of "
                    f"CUDA context) x {per_gpu} rank(s) per GPU, and the fullest GPU has "
                    f"{worst:.3g} GiB free; use a smaller model or batch, or more GPUs"
                )
    if "activations_note" in need:
        notes.append(need["activations_note"])
    return notes


def check_disk(cfg: RunConfig, need: dict, folder: Path) -> None:
    """The events, the weights and the summary's reserve must fit on the run folder's disk."""
    free = free_bytes(folder)
    if free is None:
        return
    events = cfg.run.steps * cfg.distributed.nproc * EVENT_BYTES
    weights = need.get("param_bytes", 0) if cfg.run.save_weights else 0
    total = events + weights + Reserve.SIZE + 64 * 1024
    if total > free:
        raise ConfigError(
            f"the run folder {str(folder)!r} has {mib(free)} free and this run writes about "
            f"{mib(total)} (events of {cfg.run.steps} steps x {cfg.distributed.nproc} rank(s) "
            f"{mib(events)}, weights {mib(weights)}, a {mib(Reserve.SIZE)} reserve): No space "
            "left on device; free some space or choose another folder "
            "(run.runs_dir, --run-dir)"
        )


def fsdp_note(blocks: list[str], shown: int = 4) -> str:
    """Which modules FSDP shards, in one line: the first few, and how many."""
    named = ", ".join(blocks[:shown]) + (f" ... {blocks[-1]}" if len(blocks) > shown else "")
    return (
        f"FSDP shards {len(blocks)} block(s), then the root: {named or 'none (the root alone)'} "
        "(distributed.fsdp_blocks, else the block rule)"
    )


def check_limits(cfg: RunConfig, device_type: str, folder: Path, need: dict) -> list[str]:
    """Every check against this machine, with what the precheck measured (`need`); returns notes
    (what was overridden, what was not measured)."""
    notes = check_cores(cfg)
    if need.get("fsdp_blocks") is not None:
        notes.append(fsdp_note(need["fsdp_blocks"]))
    if not need.get("timed_out"):
        notes += check_memory(cfg, need, device_type)
        check_disk(cfg, need, folder)
    else:
        notes.append(need["note"])
    return notes
