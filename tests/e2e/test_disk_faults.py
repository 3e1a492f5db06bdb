"""Disk faults named, on real small file systems (a tmpfs mounted here; needs root): a full disk
before launch and during a run, a read-only one. Each ends with one line naming the path and the
cause, summary.json holds the cause, and no empty .tmp, traceback or torn event line is left."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time

import pytest

from launch_helpers import assert_all_gone, faulty_model, run_pids, wait_for_steps
from workbench.config import ConfigError, RunConfig
from workbench.distributed.launch import start_run
from workbench.runstore import create_run_dir


@pytest.fixture
def disk(tmp_path):
    """mount(size, ro=False) -> a fresh tmpfs of that size under tmp_path, unmounted afterwards."""
    mounted = []

    def mount(size: str = "2m", ro: bool = False):
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root")
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        opts = f"size={size}" + (",ro" if ro else "")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], capture_output=True, text=True
        )
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(folder) -> None:
    """Write a file until the disk says it is full."""
    with open(folder / "filler.bin", "wb", buffering=0) as f:
        chunk = b"\1" * 65536
        while True:
            try:
                f.write(chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                chunk = chunk[: len(chunk) // 2]
                if len(chunk) < 512:
                    return


def left_behind(folder) -> list[str]:
    """Half-written leftovers: temporary files, empty files, traceback files, torn event lines."""
    bad = []
    for p in folder.rglob("*"):
        if p.is_file() and (p.name.endswith(".tmp") or p.stat().st_size == 0 or "traceback" in p.name):
            bad.append(p.name)
        if p.suffix == ".jsonl":
            text = p.read_text()
            if text and not text.endswith("\n"):
                bad.append(f"{p.name}: torn last line")
            for line in text.splitlines():
                json.loads(line)
    return bad


def test_a_full_disk_is_refused_before_launch(disk, smoke):
    where = disk("2m")
    fill(where)
    with pytest.raises(ConfigError) as e:
        start_run(smoke, where / "run")
    assert "No space left on device" in str(e.value) and str(where) in str(e.value)
    with pytest.raises(ConfigError, match="No space left on device"):
        create_run_dir(smoke, path=where / "run2")  # the write itself, past the estimate
    assert sorted(p.name for p in where.iterdir()) == ["filler.bin"]  # nothing half-made


def test_a_run_too_big_for_the_disk_is_refused_before_launch(disk, runs_root):
    where = disk("2m")
    with pytest.raises(
        ConfigError,
        match=r"has 2.00 MiB free and this run writes about .*weights "
        r"2.15 MiB.*No space left on device",
    ):
        start_run(RunConfig.default(), where / "run")  # 563k parameters: the weights alone do not fit
    assert not any(where.iterdir())


def test_a_read_only_disk_is_one_line(disk, smoke, capsys):
    from workbench.cli import main as cli

    where = disk("2m", ro=True)
    with pytest.raises(ConfigError, match=r"making the run folder .* failed: Read-only file system"):
        start_run(smoke, where / "run")
    config = where.parent / "config.json"
    smoke.save(config)
    for argv in (
        ["run", "--preset", "smoke", "--run-dir", str(where / "run")],
        ["export", "--config", str(config), "--to", str(where / "export")],
        ["loader", "make-images", str(where / "images"), "--count", "2"],
    ):
        assert cli(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "Read-only file system" in err and str(where) in err, err


def test_an_unwritable_folder_is_one_line(tmp_path, smoke):
    if os.geteuid() == 0:
        pytest.skip("root writes into any folder whatever its mode")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(ConfigError, match=r"failed: Permission denied; you may not write there"):
        start_run(smoke, locked / "run")


@pytest.mark.slow
def test_a_disk_that_fills_during_a_run_is_named_in_the_summary(disk, smoke, tmp_path):
    where = disk("8m")
    cfg = smoke.replace(
        **{
            "distributed.nproc": 2,
            "model.name": faulty_model(tmp_path),
            "model.kwargs": {"mode": "slow"},
            "run.steps": 5000,
            "run.eval_batches": 0,
        }
    )
    handle = start_run(cfg, where / "run")
    wait_for_steps(handle.run_dir, ranks=2)
    pids = run_pids(handle.proc.pid, handle.run_dir)
    fill(where)  # another program fills the disk
    t0 = time.monotonic()
    handle.wait(120)
    print(f"disk full during a run -> disk_full in {time.monotonic() - t0:.2f} s")
    s = json.loads((handle.run_dir / "summary.json").read_text())
    assert (s["status"], s["cause"]) == ("failed", "disk_full"), s
    assert "No space left on device" in s["message"] and str(where) in s["message"]
    assert left_behind(handle.run_dir) == []
    assert_all_gone(pids, within=10)


@pytest.mark.slow
def test_the_cli_names_a_full_disk_in_one_line(disk, tmp_path):
    where = disk("8m")
    run_dir = where / "cli-run"
    cmd = [
        sys.executable,
        "-m",
        "workbench",
        "run",
        "--preset",
        "smoke",
        "--model",
        faulty_model(tmp_path),
        "--set",
        'model.kwargs={"mode": "slow"}',
        "--steps",
        "5000",
        "--run-dir",
        str(run_dir),
    ]
    cli = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_steps(run_dir, ranks=1)
    fill(where)
    out, err = cli.communicate(timeout=120)
    assert cli.returncode == 1 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("workbench run: failed (disk_full): ") and "No space left on device" in last
    assert str(run_dir) in last
    assert left_behind(run_dir) == []
