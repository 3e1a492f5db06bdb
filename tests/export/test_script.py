"""The exported script builds the same data and model as the workbench from the same config and
seed, and the generated scripts name nothing undefined (a static check, no process run)."""

from __future__ import annotations

import pytest
import torch

from exported_script import import_script, undefined_names
from workbench.config import RunConfig
from workbench.export import export


@pytest.mark.parametrize(
    "changes",
    [
        {
            "data.name": "synthetic_images",
            "model.name": "cnn",
            "model.width": 8,
            "data.num_samples": 64,
            "data.image_size": 16,
        },
        {"data.name": "text", "model.name": "transformer", "model.width": 32, "data.num_samples": 64},
    ],
)
def test_script_rebuilds_the_same_data_and_model(tmp_path, changes):
    from workbench.train.data import build_data
    from workbench.train.models import build_model

    cfg = RunConfig.smoke().replace(**changes)
    export(cfg, tmp_path)
    script = import_script(tmp_path / "train.py")
    ours, theirs = build_data(cfg), script.build_data(script.settings(script.CONFIG))
    assert torch.equal(ours.train.x, theirs.train.x) and torch.equal(ours.test.y, theirs.test.y)
    torch.manual_seed(3)
    a = build_model(cfg, ours).state_dict()
    torch.manual_seed(3)
    b = script.build_model(script.settings(script.CONFIG), theirs).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"data.name": "text", "model.name": "transformer", "model.width": 32},
        {"data.name": "synthetic_images", "model.name": "cnn", "model.width": 8, "data.image_size": 16},
        {"distributed.nproc": 2, "distributed.strategy": "fsdp", "precision.dtype": "bf16"},
    ],
    ids=["mlp", "transformer", "cnn", "fsdp-bf16"],
)
def test_the_generated_scripts_name_nothing_undefined(tmp_path, changes):
    export(RunConfig.smoke().replace(**changes), tmp_path)
    for name in ("train.py", "serve.py"):
        assert undefined_names((tmp_path / name).read_text(), name) == [], name
    # the check finds a name the assembly left behind
    planted = (tmp_path / "train.py").read_text() + "\n\ndef late():\n    return build_parts_left_behind()\n"
    assert any("build_parts_left_behind" in line for line in undefined_names(planted, "train.py"))
