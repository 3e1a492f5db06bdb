"""Unstructured pruning: masks, make-it-real, CSR, and every bad input with its message."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.config import ConfigError
from workbench.train.models import MLP
from workbench.compress.unstructured import (
    check_amount,
    copy_model,
    has_masks,
    magnitude_prune,
    make_real,
    pruning_coverage,
    sparsity,
    to_sparse,
)
from workbench.compress.quantize import quantize


@pytest.fixture
def mlp():
    torch.manual_seed(0)
    return MLP(64, 10, width=32, depth=2).eval()


@pytest.mark.parametrize("amount", [-0.1, 1.5, float("nan"), float("inf")])
def test_amount_outside_unit_interval_is_refused(mlp, amount):
    with pytest.raises(ConfigError, match=r"amount must be a fraction in \[0, 1\]"):
        magnitude_prune(mlp, amount)


@pytest.mark.parametrize("amount", [True, False, "0.5", None])
def test_amount_of_wrong_type_is_refused(mlp, amount):
    with pytest.raises(ConfigError, match="amount must be a fraction in .* or a whole number"):
        magnitude_prune(mlp, amount)


def test_integer_amount_larger_than_parameter_count(mlp):
    total = sum(m.weight.numel() for m in mlp.modules() if isinstance(m, nn.Linear))
    with pytest.raises(ConfigError, match=f"between 0 and {total} parameters"):
        magnitude_prune(mlp, total + 1, scope="global")
    with pytest.raises(ConfigError, match="between 0 and 320 parameters in the smallest"):
        magnitude_prune(mlp, 321, scope="layer")  # the 32->10 head has 320 weights
    assert check_amount(total, total) == 1.0


def test_unknown_module_and_parameter_names(mlp):
    with pytest.raises(ConfigError, match=r"no module named 'net.9'.*prunable modules: net.1, net.3"):
        magnitude_prune(mlp, 0.5, layers=["net.9"])
    with pytest.raises(ConfigError, match="has no parameter 'gamma'; it has: weight, bias"):
        magnitude_prune(mlp, 0.5, layers=["net.1"], param="gamma")
    with pytest.raises(ConfigError, match="method must be one of magnitude, random"):
        magnitude_prune(mlp, 0.5, method="biggest")
    with pytest.raises(ConfigError, match="scope must be one of layer, global"):
        magnitude_prune(mlp, 0.5, scope="world")


def test_model_without_prunable_layer():
    with pytest.raises(ConfigError, match="has no prunable layer"):
        magnitude_prune(nn.Sequential(nn.ReLU(), nn.LayerNorm(4)), 0.5)


def test_pruning_a_quantized_model_is_refused(mlp):
    q, _ = quantize(mlp, "dynamic_int8", backend="torch.ao")
    with pytest.raises(ConfigError, match="cannot prune a quantized model"):
        magnitude_prune(q, 0.5)


@pytest.mark.parametrize("scope", ["layer", "global"])
@pytest.mark.parametrize("method", ["magnitude", "random"])
def test_masks_reach_the_asked_sparsity(mlp, scope, method):
    magnitude_prune(mlp, 0.7, scope=scope, method=method)
    assert has_masks(mlp)
    s = sparsity(mlp)
    assert s["sparsity"] == pytest.approx(0.7, abs=0.01)
    if scope == "layer":
        for m in mlp.modules():
            if isinstance(m, nn.Linear):
                assert (m.weight == 0).float().mean().item() == pytest.approx(0.7, abs=0.01)


def test_magnitude_removes_the_smallest_weights(mlp):
    layer = mlp.net[1]
    w = layer.weight.detach().abs().clone()
    magnitude_prune(mlp, 0.5, layers=["net.1"], scope="layer")
    kept = w[layer.weight != 0]
    dropped = w[layer.weight == 0]
    assert dropped.max() <= kept.min()
    assert (mlp.net[3].weight != 0).all()  # other layers untouched


def test_make_real_removes_hooks_and_keeps_outputs(mlp):
    magnitude_prune(mlp, 0.5)
    x = torch.rand(4, 1, 8, 8)
    before = mlp(x)
    twin = copy_model(mlp)  # a pruned model must still be copyable
    make_real(twin)
    assert not has_masks(twin)
    assert not any(n.endswith("_orig") for n, _ in twin.named_parameters())
    assert torch.allclose(twin(x), before)
    assert sparsity(twin)["sparsity"] == pytest.approx(0.5, abs=0.01)
    with pytest.raises(ConfigError, match="carries no pruning masks"):
        make_real(twin)


def test_csr_model_matches_and_needs_masks_removed(mlp):
    magnitude_prune(mlp, 0.9)
    with pytest.raises(ConfigError, match="remove the masks first"):
        to_sparse(mlp)
    make_real(mlp)
    x = torch.rand(5, 1, 8, 8)
    dense_out = mlp(x)
    sparse = to_sparse(copy_model(mlp))
    assert torch.allclose(sparse(x), dense_out, atol=1e-5)
    assert sparsity(sparse)["sparsity"] == pytest.approx(0.9, abs=0.01)
    with pytest.raises(ConfigError, match="no nn.Linear to convert"):
        to_sparse(nn.Sequential(nn.Conv2d(1, 2, 3)))


def test_a_tied_weight_is_pruned_once_and_stays_tied(gpt):
    inner = gpt.gpt
    assert inner.lm_head.weight is inner.wte.weight
    total = sum(p.numel() for p in gpt.parameters())  # parameters() counts a tied tensor once
    cov = pruning_coverage(gpt)
    assert cov["model_weights"] == total and "gpt.wte" in cov["layers_touched"]
    masked = magnitude_prune(copy_model(gpt), 0.6, scope="global")
    t = masked.gpt
    assert torch.equal(t.wte.weight, t.lm_head.weight)  # one mask on both holders
    real = make_real(masked).gpt
    assert real.lm_head.weight is real.wte.weight  # still one tensor after make_real
    assert sparsity(masked)["sparsity"] == pytest.approx(0.6, abs=0.01)
