"""Built-in models on the built-in data, and a user's model by import path with clear errors."""

import math
import os
import subprocess
import sys

import pytest
import torch

from workbench.config import ConfigError, RunConfig
from workbench.train.data import build_data, make_loader
from workbench.train.factory import load_factory
from workbench.train.models import build_model, loss_fn


@pytest.mark.parametrize(
    "model, data",
    [("mlp", "digits"), ("cnn", "digits"), ("cnn", "synthetic_images"), ("transformer", "text")],
)
def test_builtin_models_run_on_their_data(model, data):
    cfg = RunConfig.smoke().replace(
        **{"model.name": model, "data.name": data, "data.num_samples": 64, "data.image_size": 16}
    )
    bundle = build_data(cfg)
    net = build_model(cfg, bundle)
    x, y = next(iter(make_loader(bundle.train, cfg, train=True)))
    assert x.shape[1:] == bundle.input_shape and x.abs().sum() > 0  # never all zeros
    loss = loss_fn(bundle.task)(net(x), y)
    loss.backward()
    assert torch.isfinite(loss)


@pytest.mark.parametrize(
    "model, data", [("mlp", "digits"), ("cnn", "synthetic_images"), ("transformer", "text")]
)
def test_an_untrained_built_in_model_starts_near_the_loss_of_a_uniform_guess(model, data):
    # ln(classes) is the loss of a model that knows nothing yet; far above it, the logits' scale
    # is off and every lesson drawn from the first steps inherits that
    cfg = RunConfig.default().replace(**{"model.name": model, "data.name": data, "data.num_samples": 256})
    bundle = build_data(cfg)
    torch.manual_seed(0)
    net = build_model(cfg, bundle)
    x, y = next(iter(make_loader(bundle.train, cfg, train=True)))
    with torch.no_grad():
        loss = loss_fn(bundle.task)(net(x), y).item()
    assert abs(loss - math.log(bundle.num_classes)) < 0.5, (loss, bundle.num_classes)


def test_digits_is_the_real_dataset_with_a_fixed_split():
    bundle = build_data(RunConfig.smoke())
    assert len(bundle.train) + len(bundle.test) == 1797
    assert bundle.input_shape == (1, 8, 8) and bundle.num_classes == 10
    again = build_data(RunConfig.smoke())
    assert torch.equal(bundle.test.y, again.test.y)


def test_the_digits_are_read_through_scikit_learn_once_then_from_the_cache(tmp_path):
    """Every test's cache holds the digits already (conftest): this is the first use, in a fresh
    process, and the second, which must not import scikit-learn (1-3 s per process)."""
    probe = (
        "import sys; from workbench.train.digits import load_digits; x, y = load_digits(); "
        "print(len(x), len(y), 'sklearn' in sys.modules)"
    )
    env = {**os.environ, "WORKBENCH_CACHE": str(tmp_path / "empty")}
    first, second = (
        subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120, check=True
        ).stdout.split()
        for _ in range(2)
    )
    assert first == ["1797", "1797", "True"] and second == ["1797", "1797", "False"]
    assert (tmp_path / "empty" / "digits.pt").is_file()


def test_loader_shards_under_ddp_and_covers_the_data():
    cfg = RunConfig.smoke()
    bundle = build_data(cfg)
    seen = []
    for rank in (0, 1):
        for x, _ in make_loader(bundle.train, cfg, train=True, rank=rank, world_size=2):
            seen.append(len(x))
    assert sum(seen) <= len(bundle.train) and sum(seen) > len(bundle.train) * 0.9


USER_MODEL = """
import torch
def build(width=16):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 10))
def not_a_module():
    return 42
def broken(**kw):
    raise RuntimeError("boom")
"""


def test_user_model_from_a_file_and_from_a_module(tmp_path, monkeypatch):
    path = tmp_path / "mymodels.py"
    path.write_text(USER_MODEL)
    bundle = build_data(RunConfig.smoke())
    cfg = RunConfig.smoke().replace(**{"model.name": f"{path}:build", "model.kwargs": {"width": 8}})
    assert build_model(cfg, bundle)[1].out_features == 8
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("mymodels", None)
    cfg = RunConfig.smoke().replace(**{"model.name": "mymodels:build"})
    assert isinstance(build_model(cfg, bundle), torch.nn.Module)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("{dir}/missing.py:build", r"file .*missing\.py.* does not exist"),
        (
            "no_such_package_xyz.mod:build",
            r"importing 'no_such_package_xyz\.mod' failed: ModuleNotFoundError",
        ),
        ("{dir}/mymodels.py:nothere", r"has no callable 'nothere'"),
        ("{dir}/mymodels.py:not_a_module", r"the factory must return a torch\.nn\.Module, got int"),
        ("{dir}/mymodels.py:broken", r"calling the factory .* failed: RuntimeError: boom"),
        ("{dir}/mymodels.py:", r"must be 'package\.module:factory'"),
    ],
)
def test_user_model_errors_are_clear(tmp_path, spec, message):
    (tmp_path / "mymodels.py").write_text(USER_MODEL)
    cfg = RunConfig.smoke().replace(**{"model.name": spec.format(dir=tmp_path)})
    with pytest.raises(ConfigError, match=message):
        build_model(cfg, build_data(cfg))


def test_syntax_error_in_user_file_is_reported(tmp_path):
    (tmp_path / "bad.py").write_text("def build(:\n")
    with pytest.raises(ConfigError, match=r"importing .*bad\.py' failed: SyntaxError"):
        load_factory(f"{tmp_path}/bad.py:build")
