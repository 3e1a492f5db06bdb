"""Datasets as users write them: samples of numpy arrays and Python numbers train and are counted
like tensors (default_collate turns them into batches); Python lists are refused in one line that
says what to return."""

from __future__ import annotations

import json

import pytest

from workbench.config import ConfigError, RunConfig
from workbench.distributed.launch import check_launch, run

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
