"""An export carries the user's code: the factory file and the local modules it imports (found by
parsing, never importing), or a one-line error naming the module it cannot carry."""

from __future__ import annotations

import pytest

from workbench.config import ConfigError, RunConfig
from workbench.export import export
from workbench.export.carry import carry


def write(root, files: dict) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_local_modules_and_packages_travel_and_installed_ones_are_named(tmp_path):
    src = tmp_path / "mine"
    write(
        src,
        {
            "model.py": "import torch\nimport helpers\nfrom nets.blocks import Block\n"
            "try:\n    import not_installed_anywhere\nexcept ImportError:\n    pass\n"
            "def build():\n    return Block()\n",
            "helpers.py": "import math\n",
            "nets/__init__.py": "",
            "nets/blocks.py": "from torch import nn\nfrom . import layers\nclass Block(nn.Linear):\n"
            "    def __init__(self):\n        super().__init__(64, 10)\n",
            "nets/layers.py": "",
            "unused.py": "raise SystemExit('never imported, never copied')\n",
        },
    )
    out = tmp_path / "out"
    out.mkdir()
    carried = carry(f"{src}/model.py:build", "model.name", out)
    assert carried.spec == "model.py:build" and carried.installed == ["torch"]
    names = sorted(str(p.relative_to(out)) for p in carried.files)
    assert names == ["helpers.py", "model.py", "nets/__init__.py", "nets/blocks.py", "nets/layers.py"]


def test_a_module_that_is_neither_local_nor_installed_is_refused_by_name(tmp_path):
    write(tmp_path, {"model.py": "from my_missing_layers import Layer\ndef build():\n    return Layer()\n"})
    with pytest.raises(
        ConfigError,
        match="model.name: model.py imports 'my_missing_layers', which is "
        "neither next to it .* nor installed",
    ):
        carry(f"{tmp_path}/model.py:build", "model.name", tmp_path / "out")


def test_export_of_your_model_and_dataset_writes_them_next_to_the_script(tmp_path):
    write(
        tmp_path,
        {
            "net.py": "from torch import nn\nfrom parts import head\n"
            "def build(in_channels, num_classes):\n"
            "    return nn.Sequential(nn.Flatten(), head(in_channels * 64, num_classes))\n",
            "parts.py": "from torch import nn\ndef head(n, c):\n    return nn.Linear(n, c)\n",
            "data.py": "import torch\nclass D(torch.utils.data.Dataset):\n    classes = [0, 1, 2]\n"
            "    def __len__(self):\n        return 30\n"
            "    def __getitem__(self, i):\n        return torch.rand(1, 8, 8), i % 3\n"
            "def build():\n    return D()\n",
        },
    )
    cfg = RunConfig.smoke().replace(
        **{
            "model.name": f"{tmp_path}/net.py:build",
            "data.name": "dataset",
            "data.factory": f"{tmp_path}/data.py:build",
        }
    )
    result = export(cfg, tmp_path / "exported")
    assert {"net.py", "parts.py", "data.py"} <= {p.name for p in result.files}
    script = (tmp_path / "exported" / "train.py").read_text()
    assert "'factory': 'data.py:build'" in script and "'name': 'net.py:build'" in script
    assert "def user_dataset(cfg" in script and "def fit_output(" in script
    compile(script, "train.py", "exec")
    with pytest.raises(ConfigError, match="data.name 'image_folder' is not exported"):
        export(cfg.replace(**{"data.name": "image_folder", "data.path": str(tmp_path)}), tmp_path / "other")


@pytest.mark.slow
def test_an_export_runs_from_a_copy_in_another_folder_with_the_originals_gone(tmp_path):
    import json
    import os
    import shutil
    import subprocess
    import sys

    src = tmp_path / "mine"
    write(
        src,
        {
            "net.py": "from torch import nn\nfrom parts import head\n"
            "def build(in_channels, num_classes):\n"
            "    return nn.Sequential(nn.Flatten(), head(in_channels * 64, num_classes))\n",
            "parts.py": "from torch import nn\ndef head(n, c):\n    return nn.Linear(n, c)\n",
            "data.py": "import torch\nclass D(torch.utils.data.Dataset):\n    classes = [0, 1, 2]\n"
            "    def __len__(self):\n        return 60\n"
            "    def __getitem__(self, i):\n        return torch.rand(1, 8, 8), i % 3\n"
            "def build():\n    return D()\n",
        },
    )
    cfg = RunConfig.smoke().replace(
        **{
            "model.name": f"{src}/net.py:build",
            "data.name": "dataset",
            "data.factory": f"{src}/data.py:build",
            "run.steps": 3,
            "run.threads": 1,
            "run.eval_batches": 1,
        }
    )
    export(cfg, tmp_path / "exported")
    saved = json.loads((tmp_path / "exported" / "config.json").read_text())
    assert (saved["model"]["name"], saved["data"]["factory"]) == ("net.py:build", "data.py:build")
    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(tmp_path / "exported", moved)
    shutil.rmtree(src)  # the originals are gone: only the copies can run
    shutil.rmtree(tmp_path / "exported")
    env = {**os.environ, "WORKBENCH_RUNS": str(tmp_path / "runs")}
    for cwd, config in ((moved, "config.json"), (tmp_path, str(moved / "config.json"))):
        # from the export's folder, and from another one: the config names its copies beside it
        proc = subprocess.run(
            [sys.executable, "-m", "workbench", "run", "--config", config, "--json"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert json.loads(proc.stdout)["status"] == "completed"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "workbench",
            "ab",
            "--config",
            str(moved / "config.json"),
            "--vs",
            "optim.lr=0.01",
            "--rounds",
            "2",
            "--json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for command in ("tune", "submit"):  # each reads --config the same way before it starts
        assert _config_of(command, moved / "config.json").model.name == f"{moved / 'net.py'}:build"


def _config_of(command: str, config) -> RunConfig:
    import argparse
    import importlib

    module = importlib.import_module(f"workbench.cli.{command}")
    args = module.add_parser(argparse.ArgumentParser().add_subparsers()).parse_args(["--config", str(config)])
    if command == "submit":
        from workbench.cli.run import build_config

        module._fill(args)
        return build_config(args)
    from workbench.cli.run import base_config

    return base_config(args)
