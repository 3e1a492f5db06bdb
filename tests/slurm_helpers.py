"""The local SLURM cluster the SLURM test modules share: started for a module, skipped (or failed,
with WORKBENCH_REQUIRE_SLURM) where this machine cannot run one, and checked after it is stopped:
every daemon it started gone, every test host removed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psutil
import pytest

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


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
