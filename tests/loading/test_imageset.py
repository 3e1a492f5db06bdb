"""The generated image set and the Dataset that reads it: layout, decoding, augmentation, bad files."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from workbench.config import ConfigError
from workbench.loading.imageset import generate_image_set
from workbench.train.images import CorruptImageError, ImageFolder, list_images


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return generate_image_set(tmp_path_factory.mktemp("img") / "set", count=40, size=16)


def test_generated_set_has_class_folders_of_pngs(images):
    files, labels, classes = list_images(images)
    assert len(files) == 40 and all(f.suffix == ".png" for f in files)
    assert classes == [f"digit_{d}" for d in range(10)]
    assert sorted(set(labels)) == list(range(10))


def test_same_set_is_reused_and_a_different_one_refused(images):
    before = (images / "digit_0" / "000000.png").stat().st_mtime_ns
    generate_image_set(images, count=40, size=16)
    assert (images / "digit_0" / "000000.png").stat().st_mtime_ns == before
    with pytest.raises(ConfigError, match="already holds a different image set"):
        generate_image_set(images, count=41, size=16)


def test_bad_generation_arguments(tmp_path):
    with pytest.raises(ConfigError, match="count must be >= 1"):
        generate_image_set(tmp_path, count=0)
    with pytest.raises(ConfigError, match="source must be one of"):
        generate_image_set(tmp_path, source="imagenet")


def test_samples_are_decoded_normalised_and_augmented(images):
    ds = ImageFolder(images)
    pixels, label = ds.decode(3)
    assert pixels.dtype == torch.uint8 and pixels.shape == (3, 16, 16) and pixels.float().std() > 5
    torch.manual_seed(0)
    views = [ds[3][0] for _ in range(6)]
    assert views[0].dtype == torch.float32 and views[0].shape == (3, 16, 16)
    assert any(not torch.equal(views[0], v) for v in views[1:])  # random per access
    test_view = ds.subset([3], train=False)
    assert torch.equal(test_view[0][0], test_view[0][0])  # no augmentation when evaluating


def test_resize_to_requested_size(images):
    assert ImageFolder(images, image_size=24)[0][0].shape == (3, 24, 24)


def test_synthetic_source(tmp_path):
    root = generate_image_set(tmp_path / "syn", count=8, size=12, source="synthetic")
    assert ImageFolder(root).classes == ["class_0", "class_1", "class_2", "class_3"]


def test_missing_and_empty_folders(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        ImageFolder(tmp_path / "nope")
    (tmp_path / "empty" / "cats").mkdir(parents=True)
    with pytest.raises(ConfigError, match="holds no images"):
        ImageFolder(tmp_path / "empty")


@pytest.fixture
def corrupt_set(tmp_path):
    root = generate_image_set(tmp_path / "bad", count=12, size=16, source="synthetic")
    bad = root / "class_1" / "000005.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n this is not an image")
    return root, bad


def test_corrupt_file_error_names_the_file(corrupt_set):
    root, bad = corrupt_set
    ds = ImageFolder(root)
    idx = [str(f) for f in ds.files].index(str(bad))
    with pytest.raises(CorruptImageError, match="000005.png"):
        ds[idx]


def test_corrupt_file_error_crosses_loader_workers(corrupt_set):
    root, _ = corrupt_set
    loader = DataLoader(ImageFolder(root), batch_size=4, num_workers=1)
    with pytest.raises(CorruptImageError, match="000005.png"):
        for _ in loader:
            pass


def test_corrupt_file_skipped_and_counted(corrupt_set):
    root, bad = corrupt_set
    ds = ImageFolder(root, on_error="skip")
    samples = [ds[i] for i in range(len(ds))]
    assert len(samples) == 12 and all(x.shape == (3, 16, 16) for x, _ in samples)
    assert ds.skipped == {str(bad)}
    with pytest.raises(ConfigError, match="on_error must be"):
        ImageFolder(root, on_error="ignore")
