"""The inference steps of the stacking study: the trained model, + structured pruning, + int8,
measured on a run folder's saved weights; steps a model cannot take are skipped with the reason."""

from __future__ import annotations

import pytest
import torch

from workbench.config import RunConfig
from workbench.train.data import build_data
from workbench.train.models import build_model
from workbench.runstore import create_run_dir
from workbench.stacking.waterfall import waterfall_records
from workbench.stacking.inference import inference_study

from user_models import RESHAPES_BY_ATTRIBUTE


def saved_run(cfg: RunConfig):
    """A run folder holding a config and weights (freshly initialised: timing does not need training)."""
    run_dir = create_run_dir(cfg)
    torch.manual_seed(0)
    torch.save(build_model(cfg, build_data(cfg)).state_dict(), run_dir / "model.pt")
    return run_dir


def test_mlp_is_pruned_then_quantized():
    df = inference_study(saved_run(RunConfig.smoke()), amount=0.5, rounds=3)
    assert list(df["step"]) == ["trained model (fp32)", "+ structured pruning 50%", "+ dynamic int8"]
    assert df["status"][0] == "baseline"
    # 3 rounds carry no interval: undecided, never "within noise"
    assert {s.split(",")[0] for s in df["status"][1:]} == {"undecided"}
    assert "this model has not learned" in df.attrs["accuracy_note"]  # an untrained model's weights
    assert df["rounds"][1] == 3 and df["coverage"][1] == 1.0  # paired rounds, and all of it
    assert (df["samples_per_s"] > 0).all() and df["size_mib"][2] < df["size_mib"][1] < df["size_mib"][0]
    assert df["gain_vs_baseline"][2] == pytest.approx(
        df["samples_per_s"][2] / df["samples_per_s"][0], rel=1e-2
    )
    assert waterfall_records(df)["measure"][-1] == "total"


def test_a_model_structured_pruning_cannot_rebuild_is_skipped(tmp_path, monkeypatch):
    (tmp_path / "custom.py").write_text(RESHAPES_BY_ATTRIBUTE)
    monkeypatch.chdir(tmp_path)
    cfg = RunConfig.smoke().replace(**{"model.name": "custom.py:build"})
    df = inference_study(saved_run(cfg), rounds=3)
    assert list(df["status"][:2]) == ["baseline", "skipped"]
    assert "the pruned model no longer runs" in df["reason"][1]
    assert df["status"][2] != "skipped" and df["samples_per_s"][2] > 0  # int8 of the unpruned model
