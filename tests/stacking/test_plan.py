"""The stacking plan: what applies on which hardware and why not, each step cumulative and valid, and
what a step holds equal."""

from __future__ import annotations

import os

import pytest
import torch

from workbench.config import ConfigError, RunConfig
from workbench.stacking.plan import final_config, plan, plan_table


def cnn() -> RunConfig:
    return RunConfig.smoke().replace(
        **{
            "model.name": "cnn",
            "model.width": 8,
            "data.name": "synthetic_images",
            "data.image_size": 16,
            "data.num_samples": 256,
        }
    )


def test_plan_on_cpu_skips_what_cannot_run_here_with_the_reason():
    steps = plan(RunConfig.smoke(), ["bf16", "channels_last", "pin_memory", "tf32", "bf16"])
    by_label = [(s.change.key, s.reason) for s in steps]
    assert by_label[0] == ("baseline", None) and by_label[1] == ("bf16", None)
    assert "channels_last only changes image" in by_label[2][1]
    assert "pin_memory needs a GPU" in by_label[3][1]
    assert "TF32" in by_label[4][1]
    assert "already part of the config" in by_label[5][1]
    assert steps[-1].config.precision.dtype == "bf16" and not steps[-1].config.loader.pin_memory


def test_plan_table_lists_every_step():
    table = plan_table(RunConfig.smoke(), ["bf16", "pin_memory"])
    assert list(table["step"]) == ["baseline", "+ bf16", "+ pinned memory"]
    assert list(table["will_run"]) == [True, True, False]
    assert table["sets"][1] == "precision.dtype=bf16" and "needs a GPU" in table["skip_reason"][2]


def test_plan_is_cumulative_and_valid(fake_cores):
    fake_cores(4)
    cfg = final_config(cnn(), ["bf16", "channels_last", "workers", "ddp"])
    assert cfg.precision.dtype == "bf16" and cfg.precision.channels_last
    assert cfg.loader.num_workers == 2 and cfg.distributed.nproc == 2
    own = plan(cnn(), [("+ batch 64", {"loader.batch_size": 64}), ("+ bad", {"loader.batch_size": 0})])
    assert own[1].config.loader.batch_size == 64
    assert "loader.batch_size must be >= 1" in own[2].reason


def test_plan_on_a_fake_old_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    steps = {s.change.key: s.reason for s in plan(cnn(), ["bf16", "pin_memory", "ddp", "tf32"])}
    assert "has no bf16" in steps["bf16"]
    assert steps["pin_memory"] is None
    assert steps["ddp"].startswith("distributed.nproc must be <= 1 (the GPUs on this node)")
    assert "compute capability 8.0" in steps["tf32"]


def test_unknown_change_is_refused():
    with pytest.raises(ConfigError, match="stacking change 'turbo' is unknown; use one of bf16"):
        plan(RunConfig.smoke(), ["turbo"])


def test_ddp_on_cpu_says_what_it_holds_equal(monkeypatch):
    monkeypatch.delenv("WORKBENCH_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    steps = plan(RunConfig.smoke(), ["bf16", "ddp"])
    assert steps[1].note == ""
    assert steps[2].note == (
        "1 process(es) x 2 thread(s) against 2 ranks x 1 thread(s): the same cores in total (2 vs 2)"
    )
    pinned = plan(RunConfig.smoke().replace(**{"run.threads": 2}), ["ddp"])[1]
    assert pinned.reason.startswith("distributed.nproc=2 rank(s) x 2 thread(s) (run.threads) = 4 busy")
    anyway = plan(RunConfig.smoke().replace(**{"run.threads": 2, "run.oversubscribe": True}), ["ddp"])[1]
    assert "a different number of threads in total (2 vs 4)" in anyway.note


def test_a_step_that_fits_alone_but_not_beside_an_earlier_one_runs_if_that_one_is_not_kept(fake_cores):
    """2 cores: 2 DDP ranks leave no room for 2 loader workers each, yet DDP may be measured slower
    and not kept, and then the workers fit: the plan says the workers will run if the kept steps
    leave room, and the study judges it on what was kept (workbench.stacking.study)."""
    from workbench.stacking.plan import IF_ROOM

    fake_cores(2)
    steps = {s.change.key: s for s in plan(cnn(), ["ddp", "workers"])}
    assert steps["ddp"].reason is None and steps["workers"].reason is None
    assert (
        steps["workers"].note.startswith(IF_ROOM)
        and "loader processes on 2 usable core" in steps["workers"].note
    )
    assert steps["workers"].config.distributed.nproc == 2 and steps["workers"].config.loader.num_workers == 0
