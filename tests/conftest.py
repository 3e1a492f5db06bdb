"""Shared fixtures. Every test gets its own run store, so runs never leak between tests."""
from __future__ import annotations

import pytest

from workbench.config import RunConfig


@pytest.fixture(autouse=True)
def runs_root(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    monkeypatch.setenv("WORKBENCH_RUNS", str(root))
    return root


@pytest.fixture
def smoke() -> RunConfig:
    return RunConfig.smoke()
