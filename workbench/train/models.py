"""Built-in models (an MLP, a small CNN, a small transformer language model) and a user's own model
named by import path: "package.module:factory" or "path/to/file.py:factory".

What a model receives and must return, and what its factory is given, is the contract in
`workbench.train.contract` (the README's "Your own model" says the same): the factory gets
`model.kwargs` plus the data facts it names as parameters (num_classes, vocab_size, in_channels,
seq_len, input_shape), and the model's output goes through the adapter chosen on one batch.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..config import ConfigError, RunConfig
from .contract import check_model, data_facts, factory_kwargs
from .data import DataBundle
from .factory import load_factory


class MLP(nn.Module):
    """Flatten, then `depth` hidden layers of `width` with ReLU, then a classifier."""

    def __init__(self, in_features: int, num_classes: int, width: int = 256, depth: int = 3):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        for i in range(depth):
            layers += [nn.Linear(in_features if i == 0 else width, width), nn.ReLU()]
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class SmallCNN(nn.Module):
    """`depth` conv-BN-ReLU blocks of `width` channels (pooling while the image is large), then a head."""

    def __init__(
        self, in_channels: int, num_classes: int, width: int = 32, depth: int = 3, image_size: int = 32
    ):
        super().__init__()
        blocks: list[nn.Module] = []
        size, channels = image_size, in_channels
        for _ in range(depth):
            blocks += [nn.Conv2d(channels, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
            if size >= 8:
                blocks.append(nn.MaxPool2d(2))
                size //= 2
            channels = width
        self.features = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, num_classes))

    def forward(self, x):
        return self.head(self.features(x))


class TinyTransformerLM(nn.Module):
    """A causal character-level language model: embeddings, a pre-norm encoder stack, a tied head.

    The embeddings start small (std INIT_STD, as GPT-2's do): the head shares them, and at
    nn.Embedding's default std of 1 the untrained logits have a std of sqrt(width), so the first
    loss sat near a hundred times ln(vocab_size) instead of at ln(vocab_size)."""

    INIT_STD = 0.02

    def __init__(self, vocab_size: int, seq_len: int, width: int = 128, depth: int = 2, heads: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width)
        nn.init.normal_(self.embed.weight, std=self.INIT_STD)
        self.pos = nn.Parameter(torch.randn(seq_len, width) * self.INIT_STD)
        layer = nn.TransformerEncoderLayer(
            width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab_size, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer(
            "mask", nn.Transformer.generate_square_subsequent_mask(seq_len), persistent=False
        )

    def forward(self, idx):
        t = idx.shape[1]
        h = self.embed(idx) + self.pos[:t]
        h = self.blocks(h, mask=self.mask[:t, :t], is_causal=True)
        return self.head(self.norm(h))


def build_model(cfg: RunConfig, data: DataBundle, check: bool = True) -> nn.Module:
    """The config's model for this data. A user's model is checked against the contract on one
    batch (and its output adapter attached) unless `check` is False: the trainer runs that check
    itself, as a phase of its own."""
    m = cfg.model
    if m.name == "mlp":
        return MLP(math.prod(data.input_shape), data.num_classes, m.width, m.depth)
    if m.name == "cnn":
        c, h, _ = data.input_shape
        return SmallCNN(c, data.num_classes, m.width, m.depth, image_size=h)
    if m.name == "transformer":
        return TinyTransformerLM(data.num_classes, data.input_shape[0], m.width, m.depth, m.heads)
    factory = load_factory(m.name)
    kwargs = factory_kwargs(factory, m.kwargs, data_facts(data))
    try:
        model = factory(**kwargs)
    except Exception as e:
        raise ConfigError(
            f"model.name {m.name!r}: calling the factory with {kwargs!r} "
            f"(model.kwargs and the data facts it names) failed: "
            f"{type(e).__name__}: {e}"
        ) from e
    if not isinstance(model, nn.Module):
        raise ConfigError(
            f"model.name {m.name!r}: the factory must return a torch.nn.Module, got {type(model).__name__}"
        )
    if check:
        check_model(model, data)
    return model


def loss_fn(task: str):
    """Cross-entropy for classes; for a language model, over every position."""
    if task == "lm":
        return lambda logits, y: nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
    return nn.functional.cross_entropy
