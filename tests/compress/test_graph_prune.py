"""Structured pruning through torch-pruning's dependency graph: a pruned model that no longer runs
is refused, and on a chain it reaches the chain pruner's widths."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.compress.graph_prune import graph_prune
from workbench.compress.structured import chain_prune, layer_widths
from workbench.config import ConfigError
from workbench.train.models import MLP


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
