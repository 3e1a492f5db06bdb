"""Helpers for tests that launch real torchrun processes: a user model that misbehaves on a chosen
rank and step (named by file path, as a user would), and process-tree checks by pid."""

from __future__ import annotations

import time
from pathlib import Path

import psutil

from workbench.events import read_events

FAULTY_MODEL = '''
import os, signal, time
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode


class Faulty(nn.Module):
    """A small MLP for the digits data whose forward misbehaves on one rank at one step."""

    def __init__(self, mode, rank, step, attempt):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
        self.mode, self.rank, self.step, self.attempt, self.backwards = mode, rank, step, attempt, 0

    def _backward_done(self, grad):
        self.backwards += 1

    def forward(self, x):
        # Training forwards only: the FLOP count (under a dispatch mode, and only when the count is
        # not remembered yet) and the contract check (eval mode) are not steps. A step is one past
        # the backward passes done, so a forward no backward follows (the rank measuring its
        # activations) is not a step either (step must be 2 or more for that to hold).
        counted = self.training and _get_current_dispatch_mode() is None
        if counted:
            here = int(os.environ.get("RANK", 0)) == self.rank and self.backwards + 1 == self.step
            now = self.attempt < 0 or int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) == self.attempt
            if here and now:
                if self.mode == "raise":
                    raise ValueError(f"injected fault on rank {self.rank}")
                if self.mode == "refuse":  # a refusal only the rank can make (its data, its files)
                    from workbench.config import ConfigError
                    raise ConfigError(f"data.kwargs: the shard for rank {self.rank} is refused")
                if self.mode == "hang":
                    time.sleep(3600)
                if self.mode == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                if self.mode == "exit":  # as exit() in a library would, with no error to record
                    os._exit(3)
            if self.mode == "slow":
                time.sleep(0.05)
        out = self.net(x)
        if counted and out.requires_grad:
            out.register_hook(self._backward_done)
        return out


def build(mode="none", rank=1, step=3, attempt=0, ignore_sigterm=False):
    if ignore_sigterm:  # a rank that ignores polite stops
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return Faulty(mode, rank, step, attempt)
'''


def faulty_model(tmp_path: Path) -> str:
    path = tmp_path / "faulty_model.py"
    # Written once: a test that starts several runs calls this for each, and rewriting the file
    # in place while an earlier run's rank imports it hands that rank an empty module.
    if not path.exists():
        partial = path.with_suffix(".partial")
        partial.write_text(FAULTY_MODEL)
        partial.replace(path)
    return f"{path}:build"


def wait_for(cond, timeout: float, what: str, interval: float = 0.1):
    deadline, value = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last seen: {value!r})")


def steps_seen(run_dir: Path) -> dict[int, int]:
    seen: dict[int, int] = {}
    for r in read_events(run_dir):
        if r.get("event") == "step":
            seen[r["rank"]] = max(seen.get(r["rank"], 0), r["step"])
    return seen


def wait_for_steps(run_dir: Path, ranks: int, step: int = 2, timeout: float = 120) -> None:
    wait_for(
        lambda: len([s for s in steps_seen(run_dir).values() if s >= step]) >= ranks,
        timeout,
        f"{ranks} rank(s) to reach step {step} in {run_dir}",
    )


def run_pids(root_pid: int, run_dir: Path) -> set[int]:
    """Every process of a run: the supervisor's tree plus the pids the ranks recorded."""
    pids = {root_pid}
    try:
        pids |= {p.pid for p in psutil.Process(root_pid).children(recursive=True)}
    except psutil.Error:
        pass
    pids |= {r["pid"] for r in read_events(run_dir) if r.get("event") == "start"}
    return pids


def alive(pids: set[int]) -> set[int]:
    out = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.add(pid)
        except psutil.Error:
            pass
    return out


def assert_all_gone(pids: set[int], within: float) -> float:
    t0 = time.monotonic()
    try:
        wait_for(lambda: not alive(pids), within, "every process of the run to exit", 0.05)
    except AssertionError:
        left = [(p.pid, " ".join(p.cmdline()[:4])) for p in map(psutil.Process, alive(pids))]
        raise AssertionError(f"processes left after {within} s: {left}") from None
    return time.monotonic() - t0
