"""Run an exported script outside the workbench and put its losses next to the run it came from.

    from workbench.export.verify import reproduce
    reproduce("exported/", run_dir="runs/20260101-120000_mlp-bf16", steps=20)

The script is started with the export's own single-node command (plain python, or torchrun with its
rendezvous on 127.0.0.1 and a free port), in its own process group so a timeout stops every rank.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from ..config import RunConfig
from ..events import EVENT, LOSS, RANK, STEP, STEP_NUMBER, read_events
from ..runfolder import RunFolder
from ..net import free_port
from .launch_commands import single_node

METRICS = "reproduce_metrics"


def script_command(cfg: RunConfig, port: int) -> list[str]:
    """The export's single-node command, with this interpreter standing in for python/torchrun."""
    cmd = single_node(cfg, port=port, launcher=[sys.executable, "-m", "torch.distributed.run"])
    return [sys.executable, *cmd[1:]] if cmd[0] == "python" else cmd


def run_script(export_dir, steps: int | None = None, timeout_s: float = 600) -> Path:
    """Run train.py for `steps` steps; returns the folder of its per-rank loss files."""
    export_dir = Path(export_dir)
    cfg = RunFolder(export_dir).config()  # an export holds its config as a run folder does
    metrics = export_dir / METRICS
    shutil.rmtree(metrics, ignore_errors=True)
    args = ["--metrics", METRICS, "--out", ""] + (["--steps", str(steps)] if steps else [])
    proc = subprocess.Popen(
        script_command(cfg, free_port()) + args,
        cwd=export_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RuntimeError(f"the exported script did not finish in {timeout_s:.0f} s; stopped it")
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"the exported script failed (exit code {proc.returncode}):\n{out[-3000:]}")
    return metrics


def reproduce(export_dir, run_dir=None, steps: int | None = None, rank: int = 0, timeout_s: float = 600):
    """A DataFrame per step: the script's loss, and the run's loss and their difference when given."""
    import pandas as pd

    metrics = run_script(export_dir, steps, timeout_s)
    lines = RunFolder(metrics).events_file(rank).read_text().splitlines()  # named as a run's
    df = pd.DataFrame([json.loads(line) for line in lines])[[STEP_NUMBER, LOSS]].rename(
        columns={LOSS: "script_loss"}
    )
    if run_dir is not None:
        ours = {
            r[STEP_NUMBER]: r[LOSS]
            for r in read_events(run_dir)
            if r.get(EVENT) == STEP and r.get(RANK) == rank
        }
        df["workbench_loss"] = df[STEP_NUMBER].map(ours)
        df["abs_diff"] = (df["script_loss"] - df["workbench_loss"]).abs()
    return df
