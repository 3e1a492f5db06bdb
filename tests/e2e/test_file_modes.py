"""What the workbench makes is writable by its owner only, whatever the umask: a 2-rank run from
the command line and a run started in-process (a kernel's path), each under umask 000, leave
nothing in the run store or the cache that the group or other users could write (a world-writable
cache would let another user replace the data a run loads)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from workbench.distributed.launch import run

pytestmark = pytest.mark.slow


def writable_by_others(*roots) -> list[str]:
    found = []
    for root in roots:
        for folder, _, files in os.walk(root):
            for path in [folder, *(os.path.join(folder, f) for f in files)]:
                mode = os.lstat(path).st_mode
                if not stat.S_ISLNK(mode) and mode & 0o022:
                    found.append(f"{path} {stat.filemode(mode)}")
    return found


def test_a_two_rank_cli_run_under_umask_000(tmp_path):
    # a cache of its own, not the test's (which holds the digits already): the run makes it
    env = {
        **os.environ,
        "WORKBENCH_RUNS": str(tmp_path / "runs"),
        "WORKBENCH_CACHE": str(tmp_path / "first-cache"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "workbench", "run", "--preset", "smoke", "--steps", "3", "--nproc", "2"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: os.umask(0),
    )
    assert done.returncode == 0, done.stderr
    made = [p for p in (tmp_path / "runs").rglob("*")]
    assert any(p.name == "launcher.log" for p in made) and any(p.suffix == ".jsonl" for p in made)
    assert (tmp_path / "first-cache" / "digits.pt").is_file()
    assert not writable_by_others(tmp_path / "runs", tmp_path / "first-cache")


def test_an_in_process_run_under_umask_000(smoke, runs_root, tmp_path):
    before = os.umask(0)
    try:
        summary = run(smoke.replace(**{"run.steps": 3}))
    finally:
        os.umask(before)
    assert summary["status"] == "completed", summary
    assert not writable_by_others(runs_root, tmp_path / "cache")
