"""RunConfig: validation names the field, value and what is allowed; JSON round trip; presets."""

import dataclasses
import json

import pytest

from workbench.config import ConfigError, RunConfig


def build(**sections):
    return RunConfig.from_dict(sections)


BAD = [
    ({"loader": {"num_workers": -1}}, r"loader\.num_workers must be >= 0, got -1"),
    ({"loader": {"batch_size": 0}}, r"loader\.batch_size must be >= 1, got 0"),
    ({"loader": {"batch_size": 3.5}}, r"loader\.batch_size must be an integer, got 3\.5"),
    ({"loader": {"batch_size": True}}, r"loader\.batch_size must be an integer, got True"),
    ({"loader": {"prefetch_factor": 2}}, r"loader\.prefetch_factor needs loader\.num_workers >= 1"),
    ({"loader": {"persistent_workers": True}}, r"loader\.persistent_workers needs"),
    ({"loader": {"pin_memory": "yes"}}, r"loader\.pin_memory must be true or false, got 'yes'"),
    ({"precision": {"dtype": "fp8"}}, r"precision\.dtype must be one of 'fp32', 'bf16', 'fp16', got 'fp8'"),
    ({"optim": {"lr": 0}}, r"optim\.lr must be > 0, got 0"),
    ({"optim": {"lr": float("nan")}}, r"optim\.lr must be a finite number, got nan"),
    ({"optim": {"name": "adam"}}, r"optim\.name must be one of 'adamw', 'sgd', got 'adam'"),
    ({"optim": {"momentum": 1.0}}, r"optim\.momentum must be in \[0, 1\), got 1\.0"),
    ({"optim": {"grad_accum_steps": 0}}, r"optim\.grad_accum_steps must be >= 1, got 0"),
    ({"run": {"steps": 0}}, r"run\.steps must be >= 1, got 0"),
    ({"run": {"device": "tpu"}}, r"run\.device must be one of 'auto', 'cpu', 'cuda', got 'tpu'"),
    ({"run": {"label": "a/b"}}, r"run\.label must be at most 60 characters"),
    ({"model": {"name": "resnet"}}, r"model\.name must be one of mlp, cnn, transformer or an import path"),
    ({"model": {"width": 0}}, r"model\.width must be >= 1, got 0"),
    (
        {"model": {"name": "transformer", "width": 30, "heads": 4}, "data": {"name": "text"}},
        r"model\.width must be a multiple of model\.heads",
    ),
    ({"model": {"name": "transformer"}}, r"model\.name 'transformer' needs data\.name 'text'"),
    ({"data": {"name": "imagenet"}}, r"data\.name must be one of"),
    ({"data": {"test_fraction": 1.0}}, r"data\.test_fraction must be between 0 and 1"),
    ({"distributed": {"nproc": 0}}, r"distributed\.nproc must be >= 1, got 0"),
    (
        {"distributed": {"nnodes": 2, "node_rank": 2, "rdzv_endpoint": "h:1"}},
        r"distributed\.node_rank must be in \[0, 1\] for nnodes=2, got 2",
    ),
    ({"distributed": {"rdzv_endpoint": "nohost"}}, r"distributed\.rdzv_endpoint must be 'host:port'"),
    ({"distributed": {"rdzv_endpoint": "h:70000"}}, r"distributed\.rdzv_endpoint must be 'host:port'"),
    ({"distributed": {"nnodes": 2}}, r"distributed\.rdzv_endpoint is needed when distributed\.nnodes > 1"),
    ({"distributed": {"backend": "mpi"}}, r"distributed\.backend must be one of 'auto', 'gloo', 'nccl'"),
    ({"distributed": {"timeout_s": -1}}, r"distributed\.timeout_s must be > 0, got -1"),
    ({"compile": {"mode": "fast"}}, r"compile\.mode must be one of"),
    ({"loader": 5}, r"loader must be a JSON object, got 5"),
]


@pytest.mark.parametrize("sections, message", BAD, ids=[m[:40] for _, m in BAD])
def test_bad_values_name_field_value_and_allowed(sections, message):
    with pytest.raises(ConfigError, match=message):
        build(**sections)


def test_unknown_keys_are_refused_with_a_suggestion():
    with pytest.raises(
        ConfigError,
        match=r"unknown config key 'loader\.num_wrkers' \(did you mean "
        r"'loader\.num_workers'\?\)",
    ):
        build(loader={"num_wrkers": 2})
    with pytest.raises(ConfigError, match=r"unknown config key 'lodaer'"):
        build(lodaer={})


def test_direct_construction_also_validates_with_dotted_names():
    from workbench.config import LoaderConfig

    with pytest.raises(ConfigError, match=r"loader\.num_workers must be >= 0, got -1"):
        LoaderConfig(num_workers=-1)


def test_a_config_cannot_be_edited_in_place_only_replaced_with_a_checked_copy():
    cfg = RunConfig.smoke()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.loader.num_workers = -3
    with pytest.raises(ConfigError, match=r"loader\.num_workers must be >= 0, got -3"):
        cfg.replace(**{"loader.num_workers": -3})
    assert cfg.loader.num_workers == 0


def test_choices_come_from_the_annotations_and_every_precision_has_a_dtype():
    from workbench.config import choices
    from workbench.train.precision import DTYPES

    assert choices("precision.dtype") == ("fp32", "bf16", "fp16") == tuple(DTYPES)
    assert choices("run.device") == ("auto", "cpu", "cuda")
    with pytest.raises(ValueError, match="loader.batch_size has no fixed set"):
        choices("loader.batch_size")


def test_each_section_is_checked_once_when_a_config_is_built(monkeypatch):
    from workbench.config import _Section

    counts = {}
    original = _Section._validate
    monkeypatch.setattr(
        _Section,
        "_validate",
        lambda self: (
            counts.update({type(self).__name__: counts.get(type(self).__name__, 0) + 1}) or original(self)
        ),
    )
    RunConfig.smoke().replace(**{"loader.batch_size": 16})
    assert len(counts) == 10 and set(counts.values()) == {2}  # smoke(), then replace(): once each


@pytest.mark.parametrize("preset", [RunConfig.default, RunConfig.smoke, RunConfig])
def test_json_round_trip(preset):
    cfg = preset()
    again = RunConfig.from_json(cfg.to_json())
    assert again == cfg
    assert json.loads(again.to_json()) == json.loads(cfg.to_json())


def test_save_and_load(tmp_path):
    cfg = RunConfig.smoke().replace(**{"precision.dtype": "bf16", "model.kwargs": {"a": 1}})
    cfg.save(tmp_path / "c.json")
    assert RunConfig.load(tmp_path / "c.json") == cfg
    assert not list(tmp_path.glob("*.tmp"))


def test_replace_validates_and_refuses_unknown_fields():
    cfg = RunConfig.smoke()
    assert cfg.replace(**{"loader.batch_size": 7}).loader.batch_size == 7
    assert cfg.loader.batch_size == 32  # the original is untouched
    with pytest.raises(ConfigError, match=r"unknown config key 'loader\.bogus'"):
        cfg.replace(**{"loader.bogus": 1})
    with pytest.raises(ConfigError, match=r"loader\.batch_size must be >= 1, got -2"):
        cfg.replace(**{"loader.batch_size": -2})


def test_invalid_json_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not valid JSON"):
        RunConfig.from_json("{nope")
    with pytest.raises(ConfigError, match="does not exist"):
        RunConfig.load(tmp_path / "missing.json")


def test_presets_are_sensible():
    assert RunConfig.smoke().run.steps < RunConfig.default().run.steps
    assert RunConfig().distributed.world_size == 1
