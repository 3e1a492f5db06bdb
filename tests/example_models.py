"""The examples' models (examples/gpt2.py, gpt.py, resnet.py) built small and seeded, as fixtures for
tests that compress or train a real architecture, and the token batches they take."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))
V, T = 40, 16  # vocabulary and sequence length of the language models


def tokens(n=2):
    return torch.randint(0, V, (n, T), generator=torch.Generator().manual_seed(0))


@pytest.fixture
def gpt2():
    """Hugging Face GPT-2 from a config (Conv1D layers, a tied head), its output fitted."""
    import gpt2 as example

    from workbench.train.contract import fit_output

    torch.manual_seed(0)
    model = example.build(V, T).eval()
    fit_output(model, tokens())
    return model


@pytest.fixture
def gpt():
    """A GPT-style model with a tied head."""
    import gpt as example

    torch.manual_seed(0)
    return example.build(V, T).eval()


@pytest.fixture
def resnet():
    """A residual CNN on 3 x 32 x 32 images."""
    import resnet as example

    torch.manual_seed(0)
    return example.build(3, 10, width=8).eval()
