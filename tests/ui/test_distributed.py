"""The distributed panel, the scaling chart and the cluster export, without launching processes."""

from __future__ import annotations

import pytest

from workbench.distributed.jobs import job_script
from workbench.config import ConfigError
from workbench.ui.distributed import DistributedPanel
from workbench.ui.scaling_view import ScalingView, draw, scaling_figure


def test_panel_builds_the_config_and_refuses_bad_settings(smoke, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    panel = DistributedPanel(smoke)
    panel.nproc.value, panel.steps.value = 2, 7
    cfg = panel.config()
    assert (cfg.distributed.nproc, cfg.run.steps, cfg.distributed.backend) == (2, 7, "auto")
    panel.run(backend="nccl")  # no GPU here: refused with a message, nothing started
    assert panel.handle is None and "cannot run" in panel.status.value and "nccl" in panel.status.value
    assert not panel.run_button.disabled


def test_scaling_chart_draws_measured_and_ideal_per_mode():
    fig = scaling_figure()
    rows = [
        {"mode": "strong", "processes": 1, "samples_per_s": 100.0, "ideal_samples_per_s": 100.0},
        {"mode": "strong", "processes": 2, "samples_per_s": 150.0, "ideal_samples_per_s": 200.0},
        {"mode": "weak", "processes": 1, "samples_per_s": 100.0, "ideal_samples_per_s": 100.0},
    ]
    draw(fig, rows)
    names = [t.name for t in fig.data]
    assert names == ["strong: measured", "strong: ideal", "weak: measured", "weak: ideal"]
    assert list(fig.data[1].y) == [100.0, 200.0]


def test_scaling_view_reports_a_bad_plan(smoke):
    view = ScalingView(smoke, processes=(1, 3)).run(wait=True, timeout=30)
    assert isinstance(view.error, ConfigError) and "divisible" in view.status.value


def test_a_cluster_job_for_several_nodes(smoke, tmp_path):
    """The batch file `workbench submit` writes, for four nodes of eight ranks."""
    big = smoke.replace(**{"distributed.nproc": 8})
    script = job_script(big, tmp_path / "job", nodes=4)
    assert "#SBATCH --nodes=4" in script and "--node-rank=$SLURM_NODEID" in script
    assert "--nproc-per-node=8" in script and "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in script
    with pytest.raises(ConfigError, match="distributed.nproc"):
        smoke.replace(**{"distributed.nproc": 0})
