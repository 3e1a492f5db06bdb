"""The allocator a run's processes start with (workbench.machine.allocator): chosen by the config,
put into the ranks' environment before they start, reported by each run, refused in one line where
it is not installed; and under tcmalloc FSDP's peak is what each rank predicts, below DDP's."""

from __future__ import annotations

import os

import pytest

from workbench.config import ConfigError, RunConfig
from workbench.distributed.launch import run
from workbench.machine import allocator
from workbench.machine.fit import cannot_run
from workbench.trials.hosts import host_key

TCMALLOC = allocator.tcmalloc_path()


@pytest.fixture
def no_tcmalloc(monkeypatch):
    monkeypatch.setattr(allocator, "tcmalloc_path", lambda: None)


def test_a_choice_that_is_not_an_allocator_is_refused_naming_the_field():
    with pytest.raises(ConfigError) as e:
        RunConfig.default().replace(**{"run.allocator": "jemalloc"})
    assert "run.allocator" in str(e.value) and "tcmalloc" in str(e.value) and "\n" not in str(e.value)


def test_without_tcmalloc_auto_keeps_the_system_allocator_and_tcmalloc_is_refused(no_tcmalloc):
    import torch

    assert allocator.resolved("auto") == "system" and allocator.allocator_env("auto") == {}
    cfg = RunConfig.smoke().replace(**{"run.allocator": "tcmalloc"})
    reason = cannot_run(cfg, torch.device("cpu"))
    assert reason.startswith("run.allocator 'tcmalloc' is not installed") and "apt install" in reason
    assert cannot_run(RunConfig.smoke(), torch.device("cpu")) is None


def test_an_ab_of_an_allocator_not_installed_is_refused_with_no_folder(no_tcmalloc, runs_root, capsys):
    from workbench.cli import main as cli

    assert cli(["ab", "--preset", "smoke", "--b", "run.allocator=tcmalloc", "--rounds", "6"]) == 2
    err = capsys.readouterr().err
    assert "run.allocator 'tcmalloc' is not installed" in err and err.count("\n") == 1
    assert not runs_root.exists() or not any(runs_root.rglob("*.jsonl"))  # no trial folder was made


def test_tcmalloc_goes_first_in_the_preload_and_a_persons_own_preloads_stay(monkeypatch):
    monkeypatch.setattr(allocator, "tcmalloc_path", lambda: "/lib/libtcmalloc_minimal.so.4")
    env = allocator.allocator_env("auto", {"LD_PRELOAD": "/opt/mine.so:/old/libtcmalloc.so.4"})
    assert env["LD_PRELOAD"] == "/lib/libtcmalloc_minimal.so.4 /opt/mine.so"
    assert allocator.allocator_env("system") == {}


def test_variants_with_different_allocators_get_processes_of_their_own():
    """LD_PRELOAD is read once, when a process starts: an A/B of allocators cannot share a host."""
    base = RunConfig.smoke()
    assert host_key(base) != host_key(base.replace(**{"run.allocator": "system"}))


needs_tcmalloc = pytest.mark.skipif(
    TCMALLOC is None and not os.environ.get("WORKBENCH_REQUIRE_TCMALLOC"),
    reason="tcmalloc is not installed (apt install libtcmalloc-minimal4)",
)


@pytest.mark.slow
@needs_tcmalloc
def test_under_tcmalloc_fsdp_peaks_as_predicted_and_below_ddp():
    """The width-2048 MLP on 2 ranks: each rank's measured peak (its resident set) within 15 % of
    what it predicted, and FSDP, predicted to hold less than DDP, measured to hold less. Under
    glibc's allocator the same FSDP run measured about 1.6x its prediction."""
    assert TCMALLOC, "WORKBENCH_REQUIRE_TCMALLOC is set but tcmalloc is not installed"
    base = RunConfig.default().replace(
        **{
            "model.width": 2048,
            "distributed.nproc": 2,
            "run.threads": 1,
            "run.steps": 12,
            "run.eval_batches": 0,
            "run.save_weights": False,
            "run.warm_worker": False,
        }
    )
    peaks = {}
    for strategy in ("ddp", "fsdp"):
        summary = run(base.replace(**{"distributed.strategy": strategy}), timeout_s=300)
        assert summary["status"] == "completed", summary
        assert summary["allocator"] == "tcmalloc"
        memory = summary["memory_per_rank"]
        for predicted, measured in zip(memory["predicted"], memory["measured"]):
            off = abs(measured["peak"] - predicted["peak"]) / measured["peak"]
            assert off <= 0.15, (strategy, measured["rank"], predicted["peak"], measured["peak"])
        peaks[strategy] = (
            max(p["peak"] for p in memory["predicted"]),
            max(m["peak"] for m in memory["measured"]),
        )
    assert peaks["fsdp"][0] < peaks["ddp"][0] and peaks["fsdp"][1] < peaks["ddp"][1], peaks
