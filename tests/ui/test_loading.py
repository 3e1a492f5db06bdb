"""The loading lab's widgets: a real (tiny) sweep on the widget's thread fills the chart, the heat
map and the advice; a failure shows in the widget and is raised by wait()."""

from __future__ import annotations

import pytest

from workbench.config import ConfigError
from workbench.loading.imageset import generate_image_set
from workbench.train.images import ImageFolder
from workbench.loading.loader_sweep import LoaderSetting, grid

ui = pytest.importorskip("workbench.ui.loading")


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return generate_image_set(tmp_path_factory.mktemp("img") / "set", count=32, size=12, source="synthetic")


def test_lab_sweeps_on_a_thread_and_draws(images):
    settings = grid(num_workers=[0, 1], batch_size=[4, 8])
    lab = ui.LoaderLab(ImageFolder(images), settings, rounds=1, max_batches=3)
    lab.start()
    table = lab.wait(timeout=120)
    assert lab.progress.value == lab.progress.max == 4
    assert list(lab.bars.data[0].y) == [
        pytest.approx(v) for v in table.set_index("setting").samples_per_s[[s.label for s in settings]]
    ]
    assert list(lab.heat.data[0].y) == ["0w", "1w"] and list(lab.heat.data[0].x) == ["4", "8"]
    assert all(v is not None and v > 0 for row in lab.heat.data[0].z for v in row)
    assert "samples/s of 0 workers" in lab.advice_html.value and "pin_memory" in lab.advice_html.value


def test_lab_shows_and_raises_a_failure(images):
    lab = ui.LoaderLab(ImageFolder(images), [LoaderSetting(0, 64)], rounds=1, max_batches=3)
    lab.start()
    with pytest.raises(ConfigError, match="fewer than 2 batches"):
        lab.wait(timeout=60)
    assert "error: the data set" in lab.status.value and lab.progress.bar_style == "danger"
