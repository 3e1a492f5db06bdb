"""The matrix products of a model's forward, recorded with their shapes and no trace left."""

from __future__ import annotations

import torch
import torch.nn as nn

from workbench.train.matmul_shapes import matmul_shapes, side


def test_linear_layers_are_recorded_as_their_matrix_products_in_order():
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    shapes = matmul_shapes(model, torch.randn(32, 64))
    assert [(s["m"], s["k"], s["n"]) for s in shapes] == [(32, 64, 256), (32, 256, 10)]
    assert shapes[0]["flops"] == 2 * 32 * 64 * 256
    assert abs(shapes[0]["side"] - (32 * 64 * 256) ** (1 / 3)) < 0.1


def test_a_convolution_counts_as_positions_by_its_kernel_by_its_output_channels():
    model = nn.Conv2d(3, 8, 3, padding=1)
    (s,) = matmul_shapes(model, torch.randn(2, 3, 10, 10))
    assert (s["op"], s["batch"], s["m"], s["k"], s["n"]) == ("conv", 1, 2 * 10 * 10, 3 * 3 * 3, 8)
    grouped = nn.Conv2d(8, 8, 3, padding=1, groups=8)  # depthwise: 8 products of one channel each
    (g,) = matmul_shapes(grouped, torch.randn(2, 8, 10, 10))
    assert (g["batch"], g["k"], g["n"]) == (8, 9, 1)


def test_batched_products_of_attention_carry_their_batch():
    class Attention(nn.Module):
        def forward(self, x):
            return torch.bmm(x, x.transpose(1, 2))

    (s,) = matmul_shapes(Attention(), torch.randn(4, 16, 8))
    assert (s["op"], s["batch"], s["m"], s["k"], s["n"]) == ("bmm", 4, 16, 8, 16)
    assert side(s) == (16 * 8 * 16) ** (1 / 3)


def test_recording_leaves_no_trace_and_autocast_shows_in_the_dtype():
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.BatchNorm1d(8))
    x = torch.randn(4, 8)
    before = torch.get_rng_state()
    stats = model[2].running_mean.clone()
    amp = torch.autocast("cpu", dtype=torch.bfloat16)
    (s,) = matmul_shapes(model, x, amp)
    assert torch.equal(torch.get_rng_state(), before) and torch.equal(model[2].running_mean, stats)
    assert all(p.grad is None for p in model.parameters()) and s["dtype"] == "bfloat16"
