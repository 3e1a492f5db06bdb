"""The launch's checks before anything starts: bad distributed values refused, the torchrun command
(loopback with a fresh port, or the user's endpoint), and what a start across nodes may not do."""

from __future__ import annotations

import pytest

from workbench.config import ConfigError
from workbench.distributed.launch import check_launch, start_run, worker_command


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("distributed.nproc", 0, r"distributed.nproc must be >= 1, got 0"),
        ("distributed.nproc", -2, r"distributed.nproc must be >= 1, got -2"),
        ("distributed.backend", "mpi", r"distributed.backend must be one of 'auto', 'gloo', 'nccl'"),
        ("distributed.rdzv_endpoint", "node0", r"distributed.rdzv_endpoint must be 'host:port'"),
        ("distributed.rdzv_endpoint", "node0:99999", r"distributed.rdzv_endpoint must be 'host:port'"),
        ("distributed.rdzv_endpoint", ":29500", r"distributed.rdzv_endpoint must be 'host:port'"),
    ],
)
def test_bad_distributed_values_are_refused(smoke, field, value, match):
    with pytest.raises(ConfigError, match=match):
        smoke.replace(**{field: value})


def test_node_rank_out_of_range_and_missing_endpoint(smoke):
    with pytest.raises(ConfigError, match=r"distributed.node_rank must be in \[0, 1\] for nnodes=2, got 2"):
        smoke.replace(
            **{
                "distributed.nnodes": 2,
                "distributed.node_rank": 2,
                "distributed.rdzv_endpoint": "10.0.0.1:29500",
            }
        )
    with pytest.raises(ConfigError, match=r"distributed.rdzv_endpoint is needed"):
        smoke.replace(**{"distributed.nnodes": 2})


def test_nccl_needs_a_gpu_per_rank(smoke, monkeypatch, runs_root):
    import torch

    cfg = smoke.replace(**{"distributed.backend": "nccl", "distributed.nproc": 2, "run.device": "cpu"})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"'nccl' needs CUDA GPUs, found none"):
        start_run(cfg)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match=r"distributed.nproc must be <= 1 .*GPUs.*got 2"):
        start_run(cfg)
    assert not runs_root.exists() or not any(runs_root.iterdir())  # refused before anything is written
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    check_launch(cfg)  # as many GPUs as ranks: fine


def test_single_node_command_is_loopback_with_a_fresh_port(smoke, tmp_path):
    cfg = smoke.replace(**{"distributed.nproc": 2, "distributed.max_restarts": 1})
    a, b = worker_command(cfg, tmp_path), worker_command(cfg, tmp_path)
    text = " ".join(a)
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in a and "GLOO_SOCKET_IFNAME=lo" in a
    assert "--local-addr 127.0.0.1" in text and "--max-restarts=1" in text
    assert f"--log-dir={tmp_path / 'torchrun_logs'}" in a
    endpoint = [x for x in a if x.startswith("--rdzv-endpoint=127.0.0.1:")]
    assert endpoint and endpoint != [x for x in b if x.startswith("--rdzv-endpoint=")]
    assert worker_command(smoke, tmp_path)[1:3] == ["-m", "workbench.worker"]  # one rank: no torchrun


def test_multi_node_command_uses_the_users_endpoint(smoke, tmp_path):
    cfg = smoke.replace(
        **{
            "distributed.nnodes": 2,
            "distributed.node_rank": 1,
            "distributed.nproc": 4,
            "distributed.rdzv_endpoint": "node0.cluster:29400",
        }
    )
    cmd = worker_command(cfg, tmp_path)
    assert "workbench.loopback" in cmd and "--local-addr" not in cmd  # the agent binds its store
    assert {
        "--nnodes=2",
        "--node-rank=1",
        "--nproc-per-node=4",
        "--rdzv-endpoint=node0.cluster:29400",
    } <= set(cmd)


def test_saving_for_a_restart_across_nodes_started_here_is_refused_and_a_resume_needs_a_state(
    smoke, tmp_path, runs_root
):
    two = smoke.replace(
        **{"distributed.nnodes": 2, "distributed.rdzv_endpoint": "127.0.0.1:29500", "run.save_every": 5}
    )
    with pytest.raises(
        ConfigError,
        match=r"run.save_every=5 with distributed.nnodes=2 is not "
        r"allowed here: each node .*\(workbench submit",
    ):
        start_run(two)
    with pytest.raises(ConfigError, match=r"run.resume_from '.*' holds no resumable state"):
        start_run(smoke.replace(**{"run.resume_from": str(tmp_path)}))
    assert not runs_root.exists() or not any(runs_root.iterdir())  # refused before anything is written
