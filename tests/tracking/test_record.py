"""A script's own config as the tracker records it: flattened to plain settings, and a config that
holds itself (or is nested past reason) is one line naming where, never a RecursionError."""

from __future__ import annotations

import pytest

from workbench.config import ConfigError
from workbench.tracking.record import flatten, params_of


def test_a_config_is_flattened_to_its_settings():
    assert flatten({"optim": {"lr": 0.1, "betas": [0.9, 0.99]}, "seed": 1}) == {
        "optim.lr": 0.1,
        "optim.betas": [0.9, 0.99],
        "seed": 1,
    }


def test_a_config_that_holds_itself_is_one_line_naming_where():
    config = {"optim": {"lr": 0.1}}
    config["optim"]["parent"] = config
    with pytest.raises(
        ConfigError, match=r"^track\(config=\.\.\.\): optim\.parent holds the config it is inside"
    ):
        params_of(config)


def test_a_config_nested_past_reason_is_one_line():
    config = inner = {}
    for _ in range(10_000):
        inner["x"] = {}
        inner = inner["x"]
    with pytest.raises(ConfigError, match=r"is nested over 32 levels deep$"):
        params_of(config)
