"""The variants table: every row's parameters and size said the way a reader takes them."""

from __future__ import annotations

from workbench.compress.subject import Subject
from workbench.compress.variants import compare_variants
from workbench.config import RunConfig


def test_a_pruned_then_quantized_model_counts_the_pruned_parameters_and_sizes_read_as_shares():
    subject = Subject.from_config(RunConfig.smoke())
    df = compare_variants(subject, amount=0.5, batch_sizes=(8,), rounds=2).set_index("variant")
    dense, pruned = df.loc["dense", "params"], df.loc["structured 50%", "params"]
    both = df.loc["structured 50% + dynamic_int8", "params"]
    assert pruned < dense and both == pruned  # not the dense model's count (notebook 03 said so)
    assert df.loc["dense", "size_ratio"] == 1.0
    assert df.loc["structured 50%", "size_ratio"] < 1 and df.loc["dynamic_int8", "size_ratio"] < 0.5
    assert df.loc["masked 50% (hooks on)", "size_ratio"] > 1  # the mask and the original: larger
