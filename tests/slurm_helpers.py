"""The local SLURM cluster the SLURM test modules share: started for a module, skipped (or failed,
with WORKBENCH_REQUIRE_SLURM) where this machine cannot run one, and checked after it is stopped:
every daemon it started gone, every test host removed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psutil
import pytest

from launch_helpers import steps_seen, wait_for, wait_for_steps
from tools.localslurm import LocalSlurm, missing_tools


def local_cluster(folder: Path, nodes: int = 1):
    """A fixture's body: yields the running cluster."""
    lacking = missing_tools()
    if lacking or os.geteuid() != 0:
        why = f"needs root and {', '.join(lacking) or 'nothing more'}"
        if os.environ.get("WORKBENCH_REQUIRE_SLURM"):
            pytest.fail(f"the SLURM tests must run here but cannot: {why}")
        pytest.skip(f"a local SLURM cluster {why}")
    with LocalSlurm(folder, cpus=2, nodes=nodes) as c:
        started = {name: pid for name, pid in c.pids.items() if pid}
        namespaces = list(c.namespaces)
        yield c
    assert set(started) == {"munged", "slurmctld", *(f"slurmd:{n}" for n in c.nodes)}
    assert not [name for name, pid in started.items() if _alive(pid)]  # every daemon stopped
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert len(namespaces) == nodes and not [ns for ns in namespaces if ns in left]  # hosts removed


def wait_for_job_steps(job, ranks: int, step: int = 2, start_s: float = 300, steps_s: float = 180):
    """Wait for a submitted job to start running (a node still completing an earlier job keeps it
    pending), then for `ranks` of its ranks to reach `step`. A wait that times out says what SLURM
    said of the job, the steps each rank recorded and the end of the job's log."""
    try:
        wait_for(lambda: job.state().state != "PENDING", start_s, f"SLURM job {job.job_id} to start", 0.5)
        wait_for_steps(job.run_dir, ranks, step, timeout=steps_s)
    except AssertionError as e:
        try:
            state = str(job.state())
        except Exception as err:  # noqa: BLE001 - the state is only a clue here
            state = f"unknown ({err})"
        log = job.folder.log_file
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log yet)"
        raise AssertionError(
            f"{e}; SLURM says the job is {state}; steps per rank: {steps_seen(job.run_dir)}; "
            f"the job's log ends:\n{tail}"
        ) from None


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
