"""Structured pruning rebuilds smaller layers consistently, or refuses with the reason."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from example_models import T, V, tokens
from workbench.config import ConfigError
from workbench.train.models import MLP, SmallCNN
from workbench.compress.unstructured import magnitude_prune
from workbench.compress.structured import layer_widths, structured_coverage, structured_prune


def test_mlp_neurons_removed_and_next_inputs_follow():
    torch.manual_seed(0)
    m = MLP(64, 10, width=40, depth=3).eval()
    small = structured_prune(m, 0.5)
    assert layer_widths(small) == [20, 20, 20, 10]
    assert [lin.in_features for lin in small.modules() if isinstance(lin, nn.Linear)] == [64, 20, 20, 20]
    assert small(torch.rand(3, 1, 8, 8)).shape == (3, 10)
    assert layer_widths(m) == [40, 40, 40, 10]  # the input model is untouched


def test_kept_neurons_are_the_largest_and_compute_the_same():
    torch.manual_seed(0)
    m = MLP(8, 3, width=6, depth=1).eval()
    with torch.no_grad():
        m.net[1].weight[[0, 2, 4]] *= 0.01  # make neurons 0, 2, 4 the weakest
        m.net[3].weight[:, [0, 2, 4]] = 0  # and unused downstream, so outputs must agree
    small = structured_prune(m, 0.5)
    assert torch.equal(small.net[1].weight, m.net[1].weight[[1, 3, 5]])
    x = torch.rand(4, 8)
    assert torch.allclose(small(x), m(x), atol=1e-6)


def test_cnn_channels_batchnorm_and_head_follow():
    torch.manual_seed(0)
    m = SmallCNN(3, 10, width=16, depth=3, image_size=32)
    m.train()
    m(torch.rand(8, 3, 32, 32))  # give BatchNorm real running statistics
    m.eval()
    small = structured_prune(m, 0.25).eval()
    assert layer_widths(small) == [12, 12, 12, 10]
    bns = [b for b in small.modules() if isinstance(b, nn.BatchNorm2d)]
    assert all(b.num_features == 12 and b.running_mean.shape == (12,) for b in bns)
    assert small.head[-1].in_features == 12
    assert small(torch.rand(2, 3, 32, 32)).shape == (2, 10)
    same = structured_prune(m, 0.0).eval()
    x = torch.rand(2, 3, 32, 32)
    assert torch.allclose(same(x), m(x), atol=1e-5)


def test_flatten_of_a_feature_map_into_linear():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 5))
    small = structured_prune(m, 0.5)
    assert small[3].in_features == 2 * 8 * 8
    assert small(torch.rand(2, 1, 8, 8)).shape == (2, 5)


def test_integer_amount_counts_units_per_layer():
    m = MLP(64, 10, width=16, depth=2)
    assert layer_widths(structured_prune(m, 4)) == [12, 12, 10]
    with pytest.raises(ConfigError, match="between 0 and 16 units"):
        structured_prune(m, 17)
    with pytest.raises(ConfigError, match=r"fraction in \[0, 1\]"):
        structured_prune(m, 1.2)


def test_refusals_name_the_reason():
    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            return x + self.b(self.a(x))

    with pytest.raises(ConfigError, match="Residual has its own forward"):
        structured_prune(Residual(), 0.5)
    with pytest.raises(ConfigError, match="cannot follow a LayerNorm"):
        structured_prune(nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 2)), 0.5)
    with pytest.raises(ConfigError, match="needs a hidden layer"):
        structured_prune(nn.Sequential(nn.Linear(4, 2)), 0.5)
    masked = magnitude_prune(MLP(64, 10, 8, 1), 0.5)
    with pytest.raises(ConfigError, match="call make_real first"):
        structured_prune(masked, 0.5)


def gqa_llama():
    """A Llama-family model with grouped-query attention (2 KV heads for 4 query heads), built
    from a config: no download."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        num_hidden_layers=2,
        vocab_size=128,
    )
    return LlamaForCausalLM(config).eval()


def test_grouped_query_attention_is_kept_whole_and_named_while_the_mlps_are_pruned():
    import time

    from workbench.compress.long_search import QUIET_S, search_progress
    from workbench.compress.structured import structured_coverage

    model = gqa_llama()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    example = torch.randint(0, 128, (2, 16))
    said = []
    t0 = time.monotonic()
    with search_progress(said.append):
        small = structured_prune(model, 0.5, example=example)
    took = time.monotonic() - t0
    assert took < 60
    assert said == [] or took >= QUIET_S  # a short search says nothing: progress is for long ones
    assert small(example).logits.shape == (2, 16, 128)  # the pruned model runs
    for layer in small.model.layers:
        assert layer.mlp.gate_proj.out_features == layer.mlp.up_proj.out_features == 64
        assert layer.mlp.down_proj.in_features == 64
        assert (layer.self_attn.q_proj.out_features, layer.self_attn.k_proj.out_features) == (64, 32)
    cov = structured_coverage(model, small)
    left = {r["layer"]: r["why"] for r in cov["layers_left"]}
    for i in range(2):
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            assert left[f"model.layers.{i}.self_attn.{proj}"] == (
                "grouped-query attention: its query heads share KV groups, a layout a trace does "
                "not give; kept whole"
            )
        assert f"model.layers.{i}.mlp.up_proj" in cov["layers_touched"]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # untouched


def test_a_search_that_does_not_end_is_refused_in_one_line_naming_where_it_stopped(monkeypatch):
    """With the attention left in the trace, torch-pruning's group search on this model does not
    end (nor had it when stopped at 25 s): the time limit ends it with a one-line refusal naming
    the layer it was searching from, progress is said while it runs, and the model is untouched."""
    import time

    from workbench.compress import graph_prune
    from workbench.compress.long_search import search_progress

    monkeypatch.setattr(graph_prune, "GRAPH_TIME_LIMIT_S", 5.0)
    monkeypatch.setattr(graph_prune, "attention_blocks", lambda model: {})
    model = gqa_llama()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    said = []
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as e, search_progress(said.append):
        structured_prune(model, 0.5, example=torch.randint(0, 128, (2, 16)))
    assert time.monotonic() - t0 < 60
    message = str(e.value)
    assert (
        message.startswith(
            "structured pruning of LlamaForCausalLM: torch-pruning's search of "
            "its dependency graph did not end within 5 s, stopped while "
            "searching the layers coupled to model.layers."
        )
        and "\n" not in message
    )
    assert re.search(r"coupled to model\.layers\.\d\.self_attn\.v_proj;", message), message
    assert said and all(s.startswith("structured pruning of LlamaForCausalLM: ") for s in said)
    assert "s of at most 5 s)" in said[-1]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


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
