"""Shared fixtures. Every test gets its own run store, so runs never leak between tests."""
from __future__ import annotations

import pytest
import torch

from workbench.config import RunConfig


@pytest.fixture(autouse=True)
def runs_root(tmp_path, monkeypatch):
    """Its own run store, and its own cache (the record of which run folders this workbench made)."""
    root = tmp_path / "runs"
    monkeypatch.setenv("WORKBENCH_RUNS", str(root))
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    return root


@pytest.fixture(autouse=True)
def no_spares_left():
    """A panel shown in one test keeps spare runs for its process: end them after every test, so
    the next test starts as a fresh kernel would (spares warming beside its runs cost it minutes)."""
    yield
    from workbench.distributed import warm

    warm.stop_spares()


@pytest.fixture
def smoke() -> RunConfig:
    return RunConfig.smoke()


@pytest.fixture
def one_thread(monkeypatch):
    """One thread here and in workers: on a busy machine two OpenMP threads wait on each other
    (2-16x slower). For tests that check behaviour, not speed."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("WORKBENCH_THREADS", "1")
    yield
    torch.set_num_threads(before)


@pytest.fixture
def fake_cores(monkeypatch):
    """fake_cores(n): a machine with n usable cores for every rule that asks how many there are
    (workbench.machine.fit and .threads), with no session-wide thread count."""
    def set_cores(n: int) -> None:
        monkeypatch.setattr("workbench.machine.cpu.usable_cores", lambda: n)
        monkeypatch.delenv("WORKBENCH_THREADS", raising=False)
    return set_cores
