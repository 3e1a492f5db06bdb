"""Shared fixtures. Every test gets its own run store, so runs never leak between tests."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

from workbench.config import RunConfig


@pytest.fixture(scope="session")
def digits_file(tmp_path_factory) -> Path:
    """The digits as the cache keeps them, read through scikit-learn once per session: importing
    scikit-learn costs each process that first reads the digits 1-3 s, and 148 tests did."""
    from workbench.train import digits

    cache = tmp_path_factory.mktemp("digits-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WORKBENCH_CACHE", str(cache))
        digits.load_digits()
    return cache / digits.FILE


@pytest.fixture(autouse=True)
def runs_root(tmp_path, monkeypatch, digits_file):
    """Its own run store, and its own cache (the record of which run folders this workbench made),
    which holds the digits already, as a machine's cache does after its first run."""
    from workbench.cache import PRIVATE
    from workbench.disk import make_dirs

    root = tmp_path / "runs"
    cache = tmp_path / "cache"
    make_dirs(cache, PRIVATE)
    shutil.copyfile(digits_file, cache / digits_file.name)
    monkeypatch.setenv("WORKBENCH_RUNS", str(root))
    monkeypatch.setenv("WORKBENCH_CACHE", str(cache))
    return root


@pytest.fixture(scope="session")
def prechecks():
    """The pre-launch check's answers, shared by the whole session: they are kept by everything
    they depend on, so a test gains nothing from building the same model again."""
    from workbench.distributed.limits import Prechecks

    return Prechecks()


@pytest.fixture(autouse=True)
def fresh_launcher(prechecks):
    """Every test starts runs with a fresh Launcher, as a fresh kernel would, and its spares end
    with the test (spares warming beside the next test's runs cost it minutes)."""
    from workbench.distributed.launch import Launcher, use_launcher

    fresh = Launcher(prechecks)
    before = use_launcher(fresh)
    yield fresh
    fresh.close()
    use_launcher(before)


@pytest.fixture
def smoke() -> RunConfig:
    return RunConfig.smoke()


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """A cache folder of the test's own: no figure measured elsewhere is read or replaced."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


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


# Where the suite's minutes go: every test's time (setup, call and teardown together) summed by
# file into test-output/durations[-MARKERS].tsv, slowest first, at the end of a run; the workers of
# -n report to the controller, so one file covers them all.
_SPENT: dict[str, float] = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::", 1)[0]
    _SPENT[path] = _SPENT.get(path, 0.0) + report.duration


def pytest_sessionfinish(session):
    if not _SPENT or hasattr(session.config, "workerinput"):  # a worker: its controller writes
        return
    marks = re.sub(r"\W+", "-", session.config.option.markexpr or "").strip("-")
    out = Path(session.config.rootpath) / "test-output" / f"durations{'-' if marks else ''}{marks}.tsv"
    out.parent.mkdir(exist_ok=True)
    with out.open("w") as f:
        for path, s in sorted(_SPENT.items(), key=lambda kv: -kv[1]):
            f.write(f"{s:.1f}\t{path}\n")
