"""Which SLURM cluster this process reaches, by one rule for `workbench submit`, following a job and
the notebooks: the cluster `make slurm-up` started (the record it leaves in its folder), else the
one this machine's SLURM configuration (or $SLURM_CONF) names; the first that answers `sinfo`.

    access, why = find_cluster()   # (Access, where) or (None, how to start one)
    subprocess.run([*access.prefix, "sbatch", "job.slurm"], env=access.env)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

STATE = "cluster.json"  # the record `make slurm-up` leaves: its pids, its config, the words to reach it
DEFAULT_DIR = "slurm-cluster"  # where `make slurm-up` starts one (SLURM_DIR), from the repository root


@dataclass(frozen=True)
class Access:
    """How this process reaches a SLURM cluster: the words before each command and its environment
    (what `workbench.distributed.jobs.submit` and `Job` take)."""

    prefix: list[str]
    env: dict[str, str] | None
    where: str


def local_access(folder: str | Path) -> Access:
    """The cluster `make slurm-up` started in `folder`, as its record says: commands run in its
    first host's namespace with its SLURM_CONF. OSError, ValueError or KeyError when no record is
    there or it is damaged."""
    folder = Path(folder).resolve()
    state = json.loads((folder / STATE).read_text())
    prefix, conf = [str(w) for w in state["prefix"]], str(state["conf"])
    return Access(prefix, {**os.environ, "SLURM_CONF": conf}, f"the local cluster in {folder}")


def find_cluster(folder: str | Path | None = None) -> tuple[Access | None, str]:
    """The cluster `make slurm-up` started in `folder` (by default ./slurm-cluster, or the one a
    level up, where it lands for a notebook run from notebooks/), else the one this machine's SLURM
    configuration (or $SLURM_CONF) names: the first that answers `sinfo`. (None, why) when none
    does, with how to start one."""
    folders = [Path(folder)] if folder is not None else [Path(DEFAULT_DIR), Path("..") / DEFAULT_DIR]
    candidates = []
    for place in folders:
        try:
            candidates.append(local_access(place))
        except (OSError, ValueError, KeyError, TypeError):  # none started there, or a damaged record
            pass
    if shutil.which("sinfo"):
        candidates.append(Access([], None, "the cluster this machine's SLURM configuration names"))
    for access in candidates:
        try:
            answered = (
                subprocess.run(
                    [*access.prefix, "sinfo", "-h"], env=access.env, capture_output=True, timeout=10
                ).returncode
                == 0
            )
        except (OSError, subprocess.TimeoutExpired):
            answered = False
        if answered:
            return access, access.where
    why = "no SLURM cluster answers `sinfo` here" if candidates else "SLURM is not installed here"
    return None, (
        f"{why}; `make slurm-up` starts a cluster of this machine in {folders[0]} (root, "
        "Debian's slurmctld slurmd slurm-client munge)"
    )
