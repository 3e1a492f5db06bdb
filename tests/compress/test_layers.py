"""Hugging Face's Conv1D found as a weight to compress, and swapped for the Linear it is."""

from __future__ import annotations

import pytest
import torch

from example_models import T, V, tokens
from workbench.compress.layers import conv1d_to_linear, weight_targets
from workbench.compress.quantize import quantize
from workbench.compress.unstructured import copy_model, magnitude_prune, make_real, pruning_coverage, sparsity


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
