"""A GPT-style language model written the way many people write one (after nanoGPT): a fused
qkv projection split into heads, a tied embedding and output head, and a forward that returns
(logits, loss). Without targets it returns the logits of the last position only, as nanoGPT does
for generation, so the workbench needs the two-line wrapper `FullLogits` from the README.

    workbench run --model examples/gpt.py:build --set data.name=text
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.n_embd, self.n_head = n_embd, n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size: int, block_size: int, n_embd: int = 64, n_layer: int = 2, n_head: int = 4):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02 / math.sqrt(n_layer))

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        if targets is None:  # generation: only the last position is needed
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())


class FullLogits(nn.Module):
    """The README's two-line wrapper: a model that returns every position's logits only when it
    is given targets gets them, and the workbench computes the loss itself."""

    def __init__(self, gpt: nn.Module):
        super().__init__()
        self.gpt = gpt

    def forward(self, idx):
        return self.gpt(idx, targets=idx)[0]


def build(vocab_size, seq_len, n_embd: int = 64, n_layer: int = 2, n_head: int = 4):
    """The factory: asks for the data's vocabulary and sequence length by naming them."""
    return FullLogits(GPT(vocab_size, seq_len, n_embd, n_layer, n_head))


def build_bare(vocab_size, seq_len):
    """The GPT without the wrapper: the contract check says why it does not fit text data."""
    return GPT(vocab_size, seq_len)
