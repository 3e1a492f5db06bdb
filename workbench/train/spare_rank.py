"""A warm rank: a worker started before its run is known, so that the run's first step does not
wait for Python, torch and the optimizer machinery to load.

    python -m workbench.worker --warm SPARE_DIR     (started by workbench.distributed.warm)

Before its job it imports the trainer (torch, DDP, the models, the data, the profiler) and runs one
tiny forward, backward and AdamW step on the CPU: an optimizer's first step imports torch._dynamo
(about a second here). The FLOP counter is not warmed: its counts are cached per model and shape.
Then it writes SPARE_DIR/ready-RANK and waits for SPARE_DIR/job.json, which names the run's
config and hands over the environment a rank reads only after its job (HANDED_ENV: the busy
machine's thread trial, chosen at the launch); from there it is an ordinary rank. It never touches
CUDA, so a GPU run initialises its
device after taking the job, as a cold rank does; each warm process takes one job and exits with it,
so no run ever inherits another run's device state.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..machine.threads import TRIAL_ENV

JOB = "job.json"
HANDED_ENV = (TRIAL_ENV,)  # read by a rank after it takes its job, so any spare fits any value
POLL_S = 0.01  # how often a waiting rank looks for its job: a stat call, no measurable load


def ready_marker(spare_dir: Path, rank: int) -> Path:
    return Path(spare_dir) / f"ready-{rank}"


def warm_up() -> None:
    """Pay the one-off costs of a rank's first step on a throwaway CPU model (no trace is left:
    the trainer seeds every RNG itself)."""
    import torch

    from . import trainer  # noqa: F401 - the trainer's imports are what every rank loads

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    opt = torch.optim.AdamW(model.parameters())
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def take_job(spare_dir: Path, rank: int) -> tuple[Path, dict]:
    """Warm up, say so, and wait for the job. Returns its config path and what the start record
    says about this warm process (when it warmed up and whether CUDA was initialised before)."""
    t0 = time.time()
    warm_up()
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        from .rank import hold_store_port

        hold_store_port(rank)
    t_ready = time.time()
    ready_marker(spare_dir, rank).write_text(f"{t_ready:.4f}\n")
    job = Path(spare_dir) / JOB
    while not job.is_file():  # written atomically by the supervisor
        time.sleep(POLL_S)
    spec = json.loads(job.read_text())
    for name in HANDED_ENV:  # exactly the run's: a value the spare started with is not kept
        os.environ.pop(name, None)
    os.environ.update({k: v for k, v in spec.get("env", {}).items() if k in HANDED_ENV})
    config = Path(spec["config"])
    import torch

    return config, {
        "warm_up_s": round(t_ready - t0, 3),
        "ready_t": round(t_ready, 4),
        "job_t": round(time.time(), 4),
        "cuda_initialized_before_job": torch.cuda.is_initialized(),
    }
