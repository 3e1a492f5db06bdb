"""A step's cost: FLOPs counted over a real forward and backward, leaving no trace."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.config import RunConfig
from workbench.train.flops import cost_of_config, count_step


# Behaviour, not speed: one thread keeps these steady under load. Each has a cache of its own.
pytestmark = pytest.mark.usefixtures("private_cache", "one_thread")


def test_linear_layer_flops_are_forward_plus_weight_gradient():
    torch.manual_seed(0)
    model = nn.Linear(32, 16)
    x, y = torch.randn(8, 32), torch.randint(0, 16, (8,))
    flops, ops, act = count_step(model, x, y, nn.functional.cross_entropy)
    assert flops == 2 * 8 * 32 * 16 * 2  # forward, weight gradient; no input gradient needed
    assert ops > 0 and act >= x.numel() * 4


def _noisy_model():
    return nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.Dropout(0.5), nn.ReLU(), nn.Linear(32, 4))


def _train(model, steps=5):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def test_counting_leaves_rng_buffers_and_gradients_as_they_were():
    torch.manual_seed(1)
    plain = _noisy_model()
    torch.manual_seed(1)
    counted = _noisy_model()
    torch.manual_seed(2)
    reference = _train(plain)
    torch.manual_seed(2)
    count_step(counted, torch.randn(8, 16), torch.randint(0, 4, (8,)), nn.functional.cross_entropy)
    assert all(p.grad is None for p in counted.parameters())
    assert torch.equal(counted[1].running_mean, torch.zeros(32)) and counted[1].num_batches_tracked == 0
    # the batch above came from the RNG too; training restarts the same stream for a fair comparison
    torch.manual_seed(2)
    assert _train(counted) == reference


def test_cost_of_an_mlp_config_matches_the_formula():
    cfg = RunConfig.smoke().replace(
        **{"data.name": "synthetic_images", "data.num_samples": 64, "data.image_size": 4, "data.channels": 1}
    )  # 16 inputs
    c = cost_of_config(cfg)  # MLP 16 -> 64 -> 64 -> 10, batch 32
    fwd = 2 * 32 * (16 * 64 + 64 * 64 + 64 * 10)
    assert c.flops == 3 * fwd - 2 * 32 * 16 * 64  # backward is 2x forward, minus the input's gradient
    assert c.params == 16 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10
    assert c.bytes_moved == c.params * 40 + 2 * c.activation_bytes and c.intensity > 0
