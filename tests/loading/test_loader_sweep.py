"""The loader sweep and its advice: valid grids, real measurements with a training step, no
worker left behind, and a recommendation bounded by the cores each process has."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.config import ConfigError
from workbench.loading.advice import recommend, wait_share_sentence
from workbench.loading.imageset import generate_image_set
from workbench.train.images import ImageFolder
from workbench.loading.loader_sweep import (
    LoaderSetting,
    grid,
    measure_setting,
    run_sweep,
    summarize_sweep,
    train_step,
)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return generate_image_set(tmp_path_factory.mktemp("img") / "set", count=48, size=16, source="synthetic")


def test_grid_drops_settings_that_need_workers_or_a_gpu():
    settings = grid(
        num_workers=[0, 2],
        batch_size=[16],
        prefetch_factor=[None, 4],
        persistent_workers=[False, True],
        pin_memory=[False, True],
    )
    labels = [s.label for s in settings]
    assert "0w b16" in labels and "2w b16 pf4 persist" in labels
    assert not any(s.num_workers == 0 and (s.prefetch_factor or s.persistent_workers) for s in settings)
    assert not any(s.pin_memory for s in settings)  # no GPU on the test machine


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_workers": [-1]}, r"loader.num_workers must be >= 0, got -1"),
        ({"batch_size": [0]}, r"loader.batch_size must be >= 1, got 0"),
        ({"num_workers": []}, r"num_workers needs at least one value"),
    ],
)
def test_grid_refuses_bad_values(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        grid(**kwargs)


def test_too_few_samples_for_the_batch_size(images):
    with pytest.raises(ConfigError, match="fewer than 2 batches"):
        measure_setting(ImageFolder(images), LoaderSetting(0, 48), max_batches=3)


def test_sweep_with_a_training_step_measures_and_cleans_up(images):
    ds = ImageFolder(images)
    step = train_step(ds.sample_shape, len(ds.classes), width=8, depth=2)
    settings = [LoaderSetting(0, 8), LoaderSetting(1, 8, persistent_workers=True)]
    records = list(run_sweep(ds, settings, rounds=2, max_batches=4, step=step))
    done = records[-1]
    assert done["event"] == "done" and done["leftover_processes"] == []
    measures = [r for r in records if r["event"] == "measure"]
    assert [r["setting"] for r in measures] == ["0w b8", "1w b8 persist"] * 2  # interleaved
    assert measures[-1]["done"] == measures[-1]["total"] == 4
    table = summarize_sweep(records)
    assert list(table.setting) == ["0w b8", "1w b8 persist"]
    assert (table.samples_per_s > 0).all() and table.data_wait_frac.between(0, 1).all()
    assert table.speedup_vs_0_workers.iloc[0] == 1.0
    assert (table.first_batch_ms_epoch2 > 0).all()


def _table(rates: dict, rounds=6) -> pd.DataFrame:
    """Six rounds; each round's drift (a few %) hits every setting alike, as interleaving makes it."""
    rows = []
    for r in range(rounds):
        drift = 1 + 0.03 * ((r % 3) - 1)
        for (w, keep), rate in rates.items():
            s = LoaderSetting(w, 32, persistent_workers=keep)
            rows.append(
                {
                    "event": "measure",
                    "setting": s.label,
                    **s.__dict__,
                    "round": r,
                    "samples_per_s": rate * drift,
                    "first_batch_ms_epoch1": 100.0,
                    "first_batch_ms_epoch2": 40.0,
                }
            )
    return summarize_sweep(rows)


def test_recommendation_respects_cores_per_process():
    table = _table({(0, False): 100, (1, False): 150, (2, False): 190, (4, False): 260})
    assert recommend(table, cores=2, cuda=False)["loader"]["num_workers"] == 2
    one_each = recommend(table, nproc=2, cores=2, cuda=False)
    assert one_each["loader"]["num_workers"] == 1 and one_each["speedup_vs_0_workers"] == 1.5
    assert "at most 1 loader worker" in one_each["text"]
    assert "pin_memory has no effect" in one_each["text"]
    assert one_each["config_changes"]["loader.pin_memory"] is False


def test_recommendation_keeps_the_simple_setting_within_noise_and_says_why_as_a_claim():
    from workbench.measure import claims

    claims.clear()
    advice = recommend(_table({(0, False): 100, (2, True): 103}), cores=2, cuda=False)
    assert advice["loader"]["num_workers"] == 0 and "not called faster" in advice["text"]
    # it says what it measured, not "1.00x the samples/s of 0 workers" of 0 workers themselves
    assert advice["text"].startswith("Use 0w b32: no setting with workers was measured faster than it")
    (said,) = [c for c in claims.made() if c.where == "the loader advice"]
    assert said.holds and said.says == "use 0w b32"
    claims.clear()


def test_recommendation_mentions_pinning_with_a_gpu():
    advice = recommend(_table({(0, False): 100, (2, True): 180}), cores=4, cuda=True)
    assert advice["loader"]["persistent_workers"] is True
    assert "non_blocking" in advice["text"]


def test_wait_share_sentence():
    assert wait_share_sentence(0.4).startswith("your device waited for data 40 % of the time")
    assert "not the bottleneck" in wait_share_sentence(0.01)


def test_grid_keeps_one_zero_worker_baseline():
    settings = grid(num_workers=[0, 2], batch_size=[32], persistent_workers=[True])
    assert [s.label for s in settings] == ["0w b32", "2w b32 persist"]


def test_recommendation_needs_enough_rounds_to_call_workers_faster():
    advice = recommend(_table({(0, False): 100, (2, True): 180}, rounds=3), cores=2, cuda=False)
    assert advice["loader"]["num_workers"] == 0 and "too few" in advice["text"]


def test_recommendation_without_a_baseline_says_so():
    table = _table({(1, True): 100, (2, True): 120}).drop(columns="speedup_vs_0_workers")
    assert "no 0-worker setting was measured" in recommend(table, cores=2, cuda=False)["text"]
