"""The 1,797 real 8x8 handwritten digits shipped inside scikit-learn, as tensors in the cache.

Importing scikit-learn costs about a second in every process (the data itself loads in
milliseconds), so the first use on a machine reads it once through scikit-learn and keeps the
pixels and labels as a small tensor file; every later run reads that file with torch alone.
"""

from __future__ import annotations

import io

import torch

from ..cache import PRIVATE, cache_dir
from ..disk import make_dirs, write_atomic

FILE = "digits.pt"


def load_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """(images uint8 N x 8 x 8 with values 0..16, labels long N)."""
    path = cache_dir() / FILE
    try:
        saved = torch.load(path, weights_only=True)
        return saved["images"], saved["labels"]
    except (OSError, KeyError, RuntimeError, EOFError):
        pass
    from sklearn.datasets import load_digits as sklearn_digits  # once per machine

    raw = sklearn_digits()
    images = torch.tensor(raw.images, dtype=torch.uint8)
    labels = torch.tensor(raw.target, dtype=torch.long)
    try:
        make_dirs(path.parent, PRIVATE)
        buffer = io.BytesIO()
        torch.save({"images": images, "labels": labels}, buffer)
        write_atomic(path, buffer.getvalue())
    except OSError:
        pass  # an unwritable cache: read through scikit-learn again next time
    return images, labels
