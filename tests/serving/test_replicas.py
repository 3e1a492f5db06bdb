"""`serve --replicas`' checks, before any cluster starts (the replicas themselves:
tests/e2e/test_serving.py)."""

import sys

import pytest

from workbench.config import ConfigError
from workbench.serving.replicas import check_replicas


def test_without_ray_the_flag_names_the_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray.serve", None)  # an import of it raises ImportError
    with pytest.raises(ConfigError, match=r"--replicas needs Ray Serve: pip install 'workbench\[ray\]'"):
        check_replicas(2, 1)


def test_replicas_and_workers_are_one_or_the_other():
    with pytest.raises(ConfigError, match="give one"):
        check_replicas(2, 3)
    with pytest.raises(ConfigError, match="1-16"):
        check_replicas(17, 1)
