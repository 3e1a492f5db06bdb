"""Pruning and quantization of real architectures, in process: Hugging Face GPT-2 (Conv1D layers,
a tied head), a GPT-style model with a tied head, a residual CNN, and what each result covered."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from workbench.config import ConfigError
from workbench.compress.coverage import coverage_note
from workbench.compress.layers import conv1d_to_linear, weight_targets
from workbench.compress.unstructured import copy_model, magnitude_prune, make_real, pruning_coverage, sparsity
from workbench.compress.quantize import quantize
from workbench.compress.structured import chain_prune, layer_widths, structured_coverage, structured_prune
from workbench.compress.graph_prune import graph_prune
from workbench.train.contract import fit_output
from workbench.train.models import MLP

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
V, T = 40, 16


def tokens(n=2):
    return torch.randint(0, V, (n, T), generator=torch.Generator().manual_seed(0))


@pytest.fixture
def gpt2():
    import gpt2 as example

    torch.manual_seed(0)
    model = example.build(V, T).eval()
    fit_output(model, tokens())
    return model


@pytest.fixture
def gpt():
    import gpt as example

    torch.manual_seed(0)
    return example.build(V, T).eval()


@pytest.fixture
def resnet():
    import resnet as example

    torch.manual_seed(0)
    return example.build(3, 10, width=8).eval()


def test_hf_conv1d_is_pruned_elementwise_and_converted_as_the_linear_it_is(gpt2):
    from transformers.pytorch_utils import Conv1D

    convs = [n for n, m in gpt2.named_modules() if isinstance(m, Conv1D)]
    assert len(convs) == 8 and {n for n, _, _ in weight_targets(gpt2)} >= set(convs)
    twin = copy_model(gpt2)
    swapped = conv1d_to_linear(twin)
    assert sorted(swapped) == sorted(convs)
    assert torch.allclose(twin(tokens()), gpt2(tokens()), atol=1e-5)  # the same function

    cov = pruning_coverage(gpt2)
    assert cov["coverage"] > 0.9 and not cov["partial"]  # not lm_head alone
    pruned = make_real(magnitude_prune(copy_model(gpt2), 0.5, scope="global"))
    s = sparsity(pruned)
    assert s["sparsity"] == pytest.approx(0.5, abs=0.01)
    assert s["model_sparsity"] == pytest.approx(0.5 * cov["coverage"], abs=0.01)
    assert pruned(tokens()).shape == (2, T, V)

    q, info = quantize(gpt2, "dynamic_int8", backend="torch.ao")
    assert info["conv1d_as_linear"] == 8 and info["converted"] == 9  # 8 Conv1D + lm_head
    assert info["coverage"]["coverage"] > 0.9
    left = {r["layer"]: r["why"] for r in info["coverage"]["layers_left"]}
    assert "shares its weight with lm_head" in left["transformer.wte"]
    out, ref = q(tokens()), gpt2(tokens())
    assert (out.argmax(-1) == ref.argmax(-1)).float().mean() > 0.9  # int8 keeps the predictions


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


def test_quantization_counts_convolutions_and_says_the_result_is_partial(resnet):
    q, info = quantize(resnet, "dynamic_int8", backend="torch.ao")
    cov = info["coverage"]
    convs = [r for r in cov["layers_left"] if r["type"] == "Conv2d"]
    assert len(convs) == 9 and "static quantization with calibration data" in convs[0]["why"]
    assert cov["partial"] and cov["coverage"] < 0.05
    assert coverage_note(cov, "converted").startswith("partial: converted 1 layer holding")
    assert q(torch.rand(2, 3, 32, 32)).shape == (2, 10)


def test_torch_pruning_shrinks_a_residual_cnn_and_keeps_it_running(resnet):
    x = torch.rand(2, 3, 32, 32)
    small = structured_prune(resnet, 0.5, example=x)
    before = sum(p.numel() for p in resnet.parameters())
    after = sum(p.numel() for p in small.parameters())
    assert after < 0.4 * before  # channels halved on both sides of most convolutions
    assert small(torch.rand(5, 3, 32, 32)).shape == (5, 10)
    cov = structured_coverage(resnet, small)
    assert cov["tool"] == "torch-pruning" and cov["coverage"] == 1.0
    assert small.fc.out_features == 10  # the output layer keeps its size


@pytest.mark.parametrize("name", ["gpt", "gpt2"])
def test_attention_is_left_whole_with_the_reason_and_the_mlp_shrinks(name, request):
    model = request.getfixturevalue(name)
    small = structured_prune(model, 0.5, example=tokens())
    assert small(tokens(3)).shape == (3, T, V)
    cov = structured_coverage(model, small)
    left = {
        r["layer"].rsplit(".", 2)[-2] + "." + r["layer"].rsplit(".", 1)[-1]: r["why"]
        for r in cov["layers_left"]
        if "attn" in r["layer"]
    }
    assert any("split into attention heads" in why for why in left.values())
    assert 0.5 < cov["coverage"] < 0.8  # the MLPs: most of the weights, not all
    assert any("residual stream" in r["why"] for r in cov["layers_left"] if r["type"] == "Embedding")


def test_a_model_that_no_longer_runs_after_pruning_is_refused():
    class Fixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.width = nn.Linear(8, 16), nn.Linear(16, 4), 16

        def forward(self, x):
            return self.b(self.a(x).reshape(x.shape[0], self.width))

    with pytest.raises(ConfigError, match="the pruned model no longer runs .*refused"):
        graph_prune(Fixed(), 0.5, torch.rand(2, 8))
    with pytest.raises(ConfigError, match=r"a fraction in \[0, 1\)"):
        graph_prune(Fixed(), 1.0, torch.rand(2, 8))


def test_the_chain_pruner_and_torch_pruning_give_a_chain_the_same_widths():
    """The README's comparison: on a chain both tools reach the same widths (torch-pruning ranks
    a channel by its outgoing and incoming weights, the chain pruner by its own row)."""
    torch.manual_seed(0)
    mlp = MLP(64, 10, width=40, depth=3).eval()
    mine = chain_prune(mlp, 0.5)
    theirs = graph_prune(mlp, 0.5, torch.rand(2, 1, 8, 8))
    assert layer_widths(mine) == layer_widths(theirs) == [20, 20, 20, 10]
    assert layer_widths(chain_prune(mlp, 15)) == [25, 25, 25, 10]  # a count per layer: chain only
    with pytest.raises(ConfigError, match="a fraction"):
        graph_prune(mlp, 15, torch.rand(2, 1, 8, 8))
