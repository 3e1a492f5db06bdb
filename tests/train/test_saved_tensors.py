"""The one count of what autograd saves for backward: each storage once, parameters never."""

from __future__ import annotations

import torch
from torch import nn

from workbench.train.flops import count_step
from workbench.train.saved_tensors import saved_for_backward


def test_a_storage_saved_twice_counts_once_and_parameters_not_at_all():
    model = nn.Linear(16, 16, bias=False)
    x = torch.randn(4, 16, requires_grad=True)
    with saved_for_backward(model, lambda: "here") as saved:
        h = x * 2  # saves nothing of x's (a constant factor)
        y = model(h)  # saves h (the input), not the weight: a parameter
        z = (y[:, :8] * y[:, 8:]).sum()  # saves two views of y: one storage
    del z
    sizes = sorted(b for b, _ in saved.values())
    assert sizes == [h.untyped_storage().nbytes(), y.untyped_storage().nbytes()] == [256, 256], saved
    assert {where for _, where in saved.values()} == {"here"}
    assert model.weight.untyped_storage().data_ptr() not in saved


def test_a_steps_cost_counts_its_activations_with_the_same_rule():
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    with saved_for_backward(model) as saved:
        nn.functional.cross_entropy(model(x), y)
    assert count_step(model, x, y, nn.functional.cross_entropy)[2] == sum(b for b, _ in saved.values())
    assert all(p.grad is None for p in model.parameters())  # counting leaves no gradients behind
