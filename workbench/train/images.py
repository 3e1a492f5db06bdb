"""Image files on disk as a training Dataset: `ROOT/<class>/<image>` read, decoded (PIL) and
augmented per sample in plain torch ops (random shifted crop, flip, colour jitter, normalisation),
so every sample costs what real image data costs. A user's own folder of images works the same.

    data = ImageFolder("/tmp/digits64"); x, label = data[0]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ..config import IMAGE_EXTENSIONS, ConfigError


class CorruptImageError(ConfigError):
    """An image file cannot be read or decoded; the message names the file (a ConfigError, so
    every face shows it as one line)."""


def list_images(root: str | Path) -> tuple[list[Path], list[int], list[str]]:
    """Files under `root/<class>/`, their labels and the class names (sorted, so labels are stable).

    Raises ConfigError when the folder does not exist or holds no images."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(
            f"data.path {str(root)!r} does not exist or is not a folder; "
            "generate one with `workbench loader make-images DIR`"
        )
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    files, labels = [], []
    for label, cls in enumerate(classes):
        for f in sorted((root / cls).iterdir()):
            if f.suffix.lower() in IMAGE_EXTENSIONS:
                files.append(f)
                labels.append(label)
    if not files:
        raise ConfigError(
            f"data.path {str(root)!r} holds no images: expected "
            f"{str(root)}/<class>/<name>.png (or {', '.join(IMAGE_EXTENSIONS[1:])})"
        )
    return files, labels, classes


def augment(x: torch.Tensor, gen: torch.Generator | None = None, pad: int = 4) -> torch.Tensor:
    """Per-sample augmentation in plain torch ops: shifted crop, horizontal flip, brightness and
    contrast jitter, then normalisation. `x` is C x H x W float in [0, 1]."""
    c, h, w = x.shape
    dy, dx = torch.randint(0, 2 * pad + 1, (2,), generator=gen).tolist()
    x = torch.nn.functional.pad(x.unsqueeze(0), (pad, pad, pad, pad), mode="reflect")[0]
    x = x[:, dy : dy + h, dx : dx + w]
    if torch.rand((), generator=gen) < 0.5:
        x = x.flip(-1)
    brightness, contrast = (torch.rand(2, generator=gen) * 0.4 + 0.8).tolist()
    mean = x.mean()
    x = ((x - mean) * contrast + mean * brightness).clamp(0, 1)
    return (x - 0.5) / 0.25


class ImageFolder(Dataset):
    """Reads `ROOT/<class>/<image>` per sample: read the file, decode it, augment it.

    `decode(i)` gives the stored pixels (uint8, C x H x W) and `finish(pixels)` the training
    sample; a cache stores what `decode` returns, so augmentation stays random per epoch.
    on_error="raise" stops at a bad file with an error naming it; "skip" uses the next good file and
    counts the bad ones in `self.skipped` (per process: loader workers count their own)."""

    def __init__(
        self,
        root: str | Path,
        image_size: int | None = None,
        train: bool = True,
        on_error: str = "raise",
        files=None,
        labels=None,
        classes=None,
    ):
        if on_error not in ("raise", "skip"):
            raise ConfigError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if files is None:
            files, labels, classes = list_images(root)
        self.root, self.files, self.labels, self.classes = Path(root), files, labels, classes
        self.image_size, self.train, self.on_error = image_size, train, on_error
        self.skipped: set[str] = set()

    def __len__(self) -> int:
        return len(self.files)

    def subset(self, indices, train: bool) -> "ImageFolder":
        """The same folder restricted to `indices` (a train or test split)."""
        return ImageFolder(
            self.root,
            self.image_size,
            train,
            self.on_error,
            [self.files[i] for i in indices],
            [self.labels[i] for i in indices],
            self.classes,
        )

    def _read(self, path: Path) -> torch.Tensor:
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(path) as img:
                img = img.convert("RGB")
                if self.image_size and img.size != (self.image_size, self.image_size):
                    img = img.resize((self.image_size, self.image_size), Image.BILINEAR)
                pixels = np.asarray(img)
        except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as e:
            raise CorruptImageError(
                f"cannot decode image file {str(path)!r}: {type(e).__name__}: {e}; "
                "delete or replace it, or use on_error='skip'"
            ) from None
        return torch.from_numpy(pixels.copy()).permute(2, 0, 1)

    def decode(self, i: int) -> tuple[torch.Tensor, int]:
        for k in range(len(self.files)):  # with "skip", walk forward to the next good file
            j = (i + k) % len(self.files)
            try:
                return self._read(self.files[j]), self.labels[j]
            except CorruptImageError:
                if self.on_error == "raise":
                    raise
                self.skipped.add(str(self.files[j]))
        raise CorruptImageError(f"no image under {str(self.root)!r} can be decoded")

    def finish(self, pixels: torch.Tensor) -> torch.Tensor:
        x = pixels.float().div_(255)
        return augment(x) if self.train else (x - 0.5) / 0.25

    def __getitem__(self, i: int):
        pixels, label = self.decode(i)
        return self.finish(pixels), label

    @property
    def sample_shape(self) -> tuple:
        return tuple(self.decode(0)[0].shape)
