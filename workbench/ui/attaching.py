"""Attach a live dashboard to any run folder: watch a run started elsewhere (the CLI, another
notebook, a SLURM job from `workbench submit`, your own script under `workbench.track`, from a
terminal, torchrun or a job) while it goes, or replay a finished one. A SLURM
job's dashboard has a Stop button: scancel, the run recorded as stopped.

    dash = attach("runs/20260101-120000_mlp-bf16"); dash   # in a notebook cell
"""

from __future__ import annotations

import time
from pathlib import Path

from ..config import ConfigError
from ..runfolder import RunFolder
from ..runstore import processes_alive
from .dashboard import LiveDashboard


def attach(
    run_dir: str | Path, start: bool = True, job=None, appear_s: float = 0.0, **kwargs
) -> LiveDashboard:
    """A LiveDashboard on `run_dir`, sized from its config.json or a tracked script's record
    (ranks, steps), tailing it. Reads the folder only: nothing its config names is imported. `job`
    (a workbench.distributed.jobs.Job) is how to reach SLURM for a submitted run, when its commands
    need more than this environment. `appear_s`: how long to wait for a run just started elsewhere
    (a script starting up) to claim its folder.

    :param run_dir: the run folder to watch; one that holds no run is a ConfigError.
    :param start: start tailing the folder on a thread now; False: the dashboard is returned unstarted.
    :param job: the SLURM job of a submitted run; None: one made from the run folder. Ignored for a
        run that was not submitted.
    :param appear_s: seconds to wait for the folder to hold a run; 0: it must hold one already.
    """
    run_dir = Path(run_dir)
    folder = RunFolder(run_dir)
    deadline = time.monotonic() + appear_s
    while not folder.holds_run() and time.monotonic() < deadline:
        time.sleep(0.2)  # the other process is still importing its libraries
    if not folder.holds_run():
        raise ConfigError(
            f"run_dir {str(run_dir)!r} is not a run folder (no {folder.config_file.name}); "
            "pick one from workbench.runstore.list_runs()"
        )
    shape = folder.shape()  # a tracked script's folder has no RunConfig, only its shape
    on_stop = None
    if folder.job() is not None:  # a SLURM job: alive while SLURM says it has not ended
        from ..distributed.jobs import Job

        job = job or Job(run_dir)
        alive = job.running
        on_stop = lambda: job.cancel("stopped from the notebook (scancel)")  # noqa: E731
    else:
        alive = lambda: processes_alive(run_dir) is not False  # noqa: E731
    dash = LiveDashboard(
        run_dir,
        world_size=shape["ranks"] or 1,
        total_steps=shape["steps"],
        alive=alive,
        on_stop=on_stop,
        **kwargs,
    )
    return dash.start() if start else dash  # a run whose processes are gone is shown as ended
