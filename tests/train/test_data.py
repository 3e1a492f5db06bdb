"""The data a run trains on, as built and checked before it starts: bad loader and data settings
refused with clear errors; image folders, and a user's Dataset named by import path, in training
runs; and datasets as users write them: samples of numpy arrays and Python numbers train and are
counted like tensors (default_collate turns them into batches), Python lists are refused in one
line that says what to return."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

from workbench.config import ConfigError, RunConfig
from workbench.distributed.launch import check_launch, run
from workbench.loading.imageset import generate_image_set
from workbench.train.data import build_data, make_loader


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return generate_image_set(tmp_path_factory.mktemp("img") / "set", count=48, size=16, source="synthetic")


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"loader.num_workers": -1}, r"loader.num_workers must be >= 0, got -1"),
        ({"loader.batch_size": 0}, r"loader.batch_size must be >= 1, got 0"),
        ({"loader.prefetch_factor": 4}, r"prefetch_factor needs loader.num_workers >= 1"),
        ({"loader.persistent_workers": True}, r"persistent_workers needs loader.num_workers >= 1"),
        ({"data.name": "image_folder"}, r"data.path must be a folder of images"),
        ({"data.name": "dataset"}, r"data.factory must be an import path"),
        ({"data.name": "dataset", "data.factory": "not an import path"}, r"data.factory must be"),
        ({"data.on_error": "ignore"}, r"data.on_error must be one of 'raise', 'skip'"),
    ],
)
def test_bad_loader_and_data_settings(changes, match):
    with pytest.raises(ConfigError, match=match):
        RunConfig.smoke().replace(**changes)


def test_image_folder_is_checked_once_at_launch_not_on_every_config_edit(tmp_path):
    """Config validation never touches the disk; the launch checks the folder before anything
    is written or started."""
    missing = RunConfig.smoke().replace(**{"data.name": "image_folder", "data.path": "/no/such/folder"})
    with pytest.raises(ConfigError, match="does not exist"):
        check_launch(missing)
    (tmp_path / "cats").mkdir()
    (tmp_path / "cats" / "notes.txt").write_text("no images here")
    empty = missing.replace(**{"data.path": str(tmp_path)})
    with pytest.raises(ConfigError, match="holds no images"):
        check_launch(empty)


def test_image_folder_bundle_and_batches(images):
    cfg = RunConfig.smoke().replace(
        **{
            "data.name": "image_folder",
            "data.path": str(images),
            "data.image_size": 16,
            "loader.batch_size": 8,
        }
    )
    data = build_data(cfg)
    assert data.input_shape == (3, 16, 16) and data.num_classes == 4
    assert len(data.train) + len(data.test) == 48
    x, y = next(iter(make_loader(data.train, cfg, train=True)))
    assert x.shape == (8, 3, 16, 16) and y.dtype == torch.long


def test_user_dataset_by_file_path(tmp_path):
    src = tmp_path / "mydata.py"
    src.write_text(
        textwrap.dedent("""
        import torch
        from torch.utils.data import Dataset

        class Squares(Dataset):
            classes = ["small", "big"]
            def __init__(self, n):
                self.n = n
            def __len__(self):
                return self.n
            def __getitem__(self, i):
                return torch.full((5,), float(i)), int(i >= self.n // 2)

        def build(n=40):
            return Squares(n)
        def broken():
            raise RuntimeError("no data today")
    """)
    )
    cfg = RunConfig.smoke().replace(
        **{
            "data.name": "dataset",
            "data.factory": f"{src}:build",
            "data.kwargs": {"n": 50},
            "loader.batch_size": 4,
        }
    )
    data = build_data(cfg)
    assert data.input_shape == (5,) and data.num_classes == 2 and len(data.train) == 39
    x, y = next(iter(make_loader(data.train, cfg, train=True)))
    assert x.shape == (4, 5) and y.shape == (4,)
    with pytest.raises(ConfigError, match="data.factory .*no data today"):
        build_data(cfg.replace(**{"data.factory": f"{src}:broken", "data.kwargs": {}}))
    with pytest.raises(ConfigError, match="data.factory .* has no callable 'missing'"):
        build_data(cfg.replace(**{"data.factory": f"{src}:missing"}))


@pytest.mark.slow
def test_training_run_on_image_files_reports_data_wait(images):
    from workbench.events import read_events

    cfg = RunConfig.smoke().replace(
        **{
            "data.name": "image_folder",
            "data.path": str(images),
            "data.image_size": 16,
            "model.name": "cnn",
            "model.width": 8,
            "loader.batch_size": 8,
            "loader.num_workers": 1,
            "loader.persistent_workers": True,
            "run.steps": 12,
        }
    )
    summary = run(cfg, timeout_s=180)
    assert summary["status"] == "completed", summary
    assert 0 <= summary["data_wait_frac"] <= 1
    steps = [e for e in read_events(summary["run_dir"]) if e["event"] == "step"]
    assert len(steps) == 12 and all(e["data_wait_ms"] <= e["step_time_ms"] for e in steps)


@pytest.mark.slow
def test_training_run_names_a_corrupt_image(tmp_path):

    root = generate_image_set(tmp_path / "bad", count=16, size=12, source="synthetic")
    cfg = RunConfig.smoke().replace(
        **{
            "data.name": "image_folder",
            "data.path": str(root),
            "data.image_size": 12,
            "loader.batch_size": 4,
            "run.steps": 6,
            "run.eval_batches": 0,
        }
    )
    check_launch(cfg)  # the pre-launch check reads a few good images (and remembers this config)
    for f in (root / "class_2").iterdir():
        f.write_bytes(b"not a png at all")  # spoiled after the check: the rank finds them
    failed = run(cfg, timeout_s=180)
    assert failed["status"] == "failed"
    assert "CorruptImageError" in failed["error_type"] + failed["message"]
    assert "class_2" in failed["message"] and ".png" in failed["message"]
    skipped = run(cfg.replace(**{"data.on_error": "skip"}), timeout_s=180)
    assert skipped["status"] == "completed", skipped
    with pytest.raises(ConfigError, match=r"cannot decode image file .*class_2.* on_error='skip'"):
        run(cfg.replace(**{"run.seed": 1, "loader.batch_size": 8}))  # unchecked: refused before launch


DATASETS = '''
import numpy as np
from torch.utils.data import Dataset


class NumpyPoints(Dataset):
    """Points in 8 dimensions, labelled by the sign of their sum: numpy arrays and Python ints."""
    classes = 2

    def __init__(self, n=256, as_list=False):
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((n, 8)).astype(np.float32)
        self.y = (self.x.sum(1) > 0).astype(np.int64)
        self.as_list = as_list

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        x = self.x[i]
        return (x.tolist() if self.as_list else x), int(self.y[i])


def build(as_list=False):
    return NumpyPoints(as_list=as_list)
'''


def config(tmp_path, **kwargs) -> RunConfig:
    path = tmp_path / "points.py"
    path.write_text(DATASETS)
    return RunConfig.smoke().replace(
        **{
            "data.name": "dataset",
            "data.factory": f"{path}:build",
            "data.kwargs": kwargs,
            "run.steps": 4,
            "run.threads": 1,
            "run.eval_batches": 2,
            "loader.batch_size": 16,
        }
    )


def test_a_dataset_of_numpy_arrays_and_numbers_trains_and_is_counted(tmp_path):
    summary = run(config(tmp_path), timeout_s=180)
    assert summary["status"] == "completed", summary
    assert summary.get("mfu_error") is None and summary["steps"] == 4  # the FLOP reader read it


def test_a_dataset_of_python_lists_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError) as e:
        check_launch(config(tmp_path, as_list=True))
    message = str(e.value)
    assert "sample 0's input is a Python list; return a tensor, a numpy array or a number" in message
    assert "\n" not in message and "has no attribute" not in message


def test_a_factory_parameter_the_workbench_does_not_know_lists_the_facts(tmp_path):
    model = tmp_path / "net.py"
    model.write_text(
        "from torch import nn\ndef build(vocab, num_classes):\n    return nn.Linear(8, num_classes)\n"
    )
    with pytest.raises(ConfigError) as e:
        check_launch(config(tmp_path).replace(**{"model.name": f"{model}:build"}))
    message = str(e.value)
    assert (
        "the factory's parameter 'vocab' is neither in model.kwargs nor a fact of this data "
        "(did you mean 'vocab_size'?); the facts it can ask for by name: input_shape, "
        "num_classes"
        in message
        and "\n" not in message
    )


def test_ab_takes_your_model_and_dataset_from_the_command_line(tmp_path, capsys):
    from workbench.cli import main as cli

    model = tmp_path / "net.py"
    model.write_text(
        "from torch import nn\ndef build(input_shape, num_classes):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(input_shape[0], num_classes))\n"
    )
    (tmp_path / "points.py").write_text(DATASETS)
    code = cli(
        [
            "ab",
            "--preset",
            "smoke",
            "--model",
            f"{model}:build",
            "--data",
            "dataset",
            "--data-factory",
            f"{tmp_path / 'points.py'}:build",
            "--slice-s",
            "0.05",
            "--rounds",
            "1",
            "--set",
            "run.threads=1",
            "--set",
            "run.eval_batches=0",
            "--json",
        ]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert all(n >= 1 for counts in result["steps"].values() for n in counts), result["steps"]
    from pathlib import Path

    from workbench.runfolder import RunFolder

    sides = [RunFolder(Path(result["folder"]) / side).config() for side in (result["a"], result["b"])]
    assert all(c.model.name == f"{model}:build" and c.data.name == "dataset" for c in sides)
