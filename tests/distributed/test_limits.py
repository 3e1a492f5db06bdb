"""Limits checked before launch against the machine (faked where the machine would have to be
different): cores, loader workers, RAM, GPU memory, the batch and the disk; and what the pre-launch
child measures on the real machine."""

from __future__ import annotations

import pytest

from workbench.config import ConfigError, RunConfig
from workbench.distributed import limits
from workbench.distributed.launch import launcher
from workbench.distributed.limits import check_cores, check_disk, check_memory, memory_need


@pytest.fixture
def two_cores(fake_cores):
    fake_cores(2)


def test_the_precheck_measures_the_model_and_the_data(smoke):
    need = launcher().precheck(smoke)
    assert need["params"] == 64 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10  # the smoke MLP, counted
    assert need["train_samples"] == 1402 and need["base_rss_gib"] > 0.05
    assert need["activation_bytes_per_sample"] > 0
    assert launcher().precheck(smoke) is need  # kept for configs that name no code


def test_a_model_too_big_to_build_is_counted_on_the_meta_device(smoke):
    need = launcher().precheck(smoke.replace(**{"model.width": 10**6}))  # 10^12 parameters, nothing allocated
    assert need["params"] > 10**12 and "activations not measured" in need["activations_note"]
    with pytest.raises(ConfigError, match=r"needs about .* GiB of RAM .* available"):
        check_memory(smoke.replace(**{"model.width": 10**6}), need, "cpu")


@pytest.mark.parametrize(
    "changes, words",
    [
        (
            {"distributed.nproc": 4},
            "distributed.nproc=4 rank(s) x 1 thread(s) (run.threads) = 4 busy threads on 2",
        ),
        ({"run.threads": 8}, "1 rank(s) x 8 thread(s) (run.threads) = 8 busy threads on 2 usable core(s)"),
        ({"loader.num_workers": 3}, "loader.num_workers=3 x 1 rank(s) = 3 loader processes on 2 usable"),
    ],
)
def test_more_threads_or_workers_than_cores_needs_an_explicit_override(two_cores, smoke, changes, words):
    cfg = smoke.replace(**changes)
    with pytest.raises(ConfigError) as e:
        check_cores(cfg)
    assert words in str(e.value) and "run.oversubscribe=true (workbench run --oversubscribe)" in str(e.value)
    notes = check_cores(cfg.replace(**{"run.oversubscribe": True}))
    assert len(notes) == 1 and notes[0].startswith("run.oversubscribe=true: running anyway: ")
    assert check_cores(smoke.replace(**{"distributed.nproc": 2})) == []  # 2 x 1 on 2 cores: fine


def test_override_is_a_validated_field(smoke):
    with pytest.raises(ConfigError, match="run.oversubscribe must be true or false, got 'yes'"):
        smoke.replace(**{"run.oversubscribe": "yes"})


def test_ram_is_checked_for_every_rank(monkeypatch, smoke):
    need = launcher().precheck(smoke)
    per_rank = memory_need(smoke, need, "cpu")["host_gib"]
    monkeypatch.setattr(limits, "memory_info", lambda: {"available_gib": per_rank * 3.5})
    check_memory(smoke.replace(**{"distributed.nproc": 3}), need, "cpu")
    with pytest.raises(ConfigError, match=r"needs about .* GiB of RAM \(4 rank\(s\) x \(torch "):
        check_memory(smoke.replace(**{"distributed.nproc": 4}), need, "cpu")


def test_gpu_memory_is_checked_per_gpu(monkeypatch, smoke):
    need = launcher().precheck(smoke)
    monkeypatch.setattr(limits, "gpu_free_gib", lambda: [0.5, 40.0])  # a fake GPU pair, one nearly full
    with pytest.raises(
        ConfigError,
        match=r"GPU memory .* 1 rank\(s\) per GPU, and the fullest GPU has "
        r"0.5 GiB free",
    ):
        check_memory(smoke.replace(**{"distributed.nproc": 2}), need, "cuda")
    monkeypatch.setattr(limits, "gpu_free_gib", lambda: [40.0, 40.0])
    assert check_memory(smoke.replace(**{"distributed.nproc": 2}), need, "cuda") == []


def test_the_batch_must_fit_the_data(smoke):
    need = launcher().precheck(smoke)
    with pytest.raises(
        ConfigError,
        match=r"loader.batch_size must be <= 701, the training samples each "
        r"of the 2 rank\(s\) gets .*got 1000",
    ):
        memory_need(smoke.replace(**{"loader.batch_size": 1000, "distributed.nproc": 2}), need, "cpu")


def test_the_disk_must_hold_what_the_run_writes(monkeypatch, smoke, tmp_path):
    need = launcher().precheck(smoke)
    monkeypatch.setattr(limits, "free_bytes", lambda folder: 100_000)
    with pytest.raises(ConfigError, match=r"has 0.10 MiB free and this run writes about .*No space left"):
        check_disk(smoke, need, tmp_path)
    monkeypatch.setattr(limits, "free_bytes", lambda folder: 10 * 2**20)
    check_disk(smoke, need, tmp_path)


def test_a_data_factory_is_checked_before_launch(tmp_path, runs_root):
    (tmp_path / "data.py").write_text("def build():\n    return [1, 2, 3]\n")
    from workbench.distributed.launch import start_run

    cfg = RunConfig.smoke().replace(**{"data.name": "dataset", "data.factory": f"{tmp_path}/data.py:build"})
    with pytest.raises(ConfigError, match=r"data.factory .* must return a torch Dataset"):
        start_run(cfg)
    assert not runs_root.exists() or not any(runs_root.iterdir())
