"""`workbench run`'s flags build the config's distributed section, and a bad value is refused."""

from __future__ import annotations

import json

import pytest

from workbench.config import ConfigError, RunConfig


def test_cli_flags_build_the_distributed_section():
    import argparse

    from workbench.cli import run as cli_run

    parser = argparse.ArgumentParser()
    cli_run.add_parser(parser.add_subparsers())
    args = parser.parse_args(
        [
            "run",
            "--preset",
            "smoke",
            "--nproc",
            "2",
            "--nnodes",
            "2",
            "--node-rank",
            "1",
            "--rdzv-endpoint",
            "10.1.2.3:29400",
            "--backend",
            "gloo",
            "--max-restarts",
            "1",
        ]
    )
    d = cli_run.build_config(args).distributed
    assert (d.nproc, d.nnodes, d.node_rank, d.rdzv_endpoint, d.backend, d.max_restarts) == (
        2,
        2,
        1,
        "10.1.2.3:29400",
        "gloo",
        1,
    )
    bad = parser.parse_args(["run", "--nnodes", "2", "--node-rank", "5", "--rdzv-endpoint", "h:1"])
    with pytest.raises(ConfigError, match="distributed.node_rank"):
        cli_run.build_config(bad)
    assert json.loads(RunConfig.smoke().to_json())["distributed"]["timeout_s"] > 0
