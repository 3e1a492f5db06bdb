"""The decoded cache: one shared copy across loader workers, a reusable disk file, fresh
augmentation every epoch, and a clear refusal when it would not fit in RAM."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from workbench.config import ConfigError
from workbench.loading import decoded_cache as cache_mod
from workbench.loading.decoded_cache import CacheTooLarge, DecodedCache
from workbench.loading.imageset import generate_image_set
from workbench.train.images import ImageFolder


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return generate_image_set(tmp_path_factory.mktemp("img") / "set", count=24, size=16, source="synthetic")


def test_memory_cache_is_filled_by_workers_and_shared(images):
    cached = DecodedCache(ImageFolder(images), "memory")
    assert cached.cached_fraction == 0 and cached.nbytes >= 24 * 3 * 16 * 16
    labels = [y for _, y in DataLoader(cached, batch_size=6, num_workers=2)]
    assert cached.cached_fraction == 1.0  # written in the workers, seen here
    plain = ImageFolder(images)
    assert torch.cat(labels).tolist() == plain.labels
    assert torch.equal(cached.store[7], plain.decode(7)[0])


def test_cache_keeps_augmentation_random(images):
    cached = DecodedCache(ImageFolder(images), "memory")
    torch.manual_seed(0)
    views = [cached[2][0] for _ in range(6)]
    assert any(not torch.equal(views[0], v) for v in views[1:])


def test_disk_cache_survives_and_is_reused(images, tmp_path):
    first = DecodedCache(ImageFolder(images), "disk", cache_dir=tmp_path)
    for _ in DataLoader(first, batch_size=8, num_workers=1):
        pass
    second = DecodedCache(ImageFolder(images), "disk", cache_dir=tmp_path)
    assert second.cached_fraction == 1.0
    assert second[5][0].shape == (3, 16, 16)


def test_whole_sample_cache_for_a_plain_dataset():
    data = TensorDataset(torch.randn(10, 4), torch.arange(10))
    cached = DecodedCache(data)
    x, y = cached[3]
    assert torch.equal(x, data[3][0]) and y == 3


def test_cache_too_large_for_ram_is_refused(images, monkeypatch):
    monkeypatch.setattr(cache_mod, "available_ram_bytes", lambda: 20_000)
    with pytest.raises(CacheTooLarge, match=r"memory cache of 24 samples .* needs .* GiB but only"):
        DecodedCache(ImageFolder(images), "memory")


def test_cache_near_ram_limit_warns(images, monkeypatch):
    need = DecodedCache(ImageFolder(images), "memory").nbytes
    monkeypatch.setattr(cache_mod, "available_ram_bytes", lambda: int(need * 1.5))
    with pytest.warns(ResourceWarning, match="of RAM available"):
        DecodedCache(ImageFolder(images), "memory")


def test_bad_cache_arguments(images):
    with pytest.raises(ConfigError, match="cache mode must be"):
        DecodedCache(ImageFolder(images), "gpu")
    with pytest.raises(ConfigError, match="needs cache_dir"):
        DecodedCache(ImageFolder(images), "disk")
