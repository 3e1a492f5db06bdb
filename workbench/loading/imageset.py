"""An on-disk image set the workbench generates itself (no download), and the Dataset that reads it.

    workbench loader make-images /tmp/digits64 --count 2000 --size 64

Every sample costs what real image data costs: a file read, a PNG decode (PIL) and per-sample
augmentation in plain torch ops (random shifted crop, flip, colour jitter, normalisation). The
layout is the usual one, `ROOT/<class name>/<file>.png`, so a user's own folder of images works too.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ..config import IMAGE_EXTENSIONS

MANIFEST = "imageset.json"


class CorruptImageError(ValueError):
    """An image file cannot be read or decoded; the message names the file."""


def _digit_images(count: int, size: int, seed: int):
    """Digits from scikit-learn's bundled set, upscaled, tinted and noised so PNGs do not compress
    to nothing (decoding must cost what it costs for photos of that size)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    raw = load_digits()
    rng = np.random.default_rng(seed)
    for i in range(count):
        k = i % len(raw.images)
        small = Image.fromarray((raw.images[k] * 15.9).astype(np.uint8), "L")
        ink_map = np.asarray(small.resize((size, size), Image.BILINEAR), dtype=np.float32) / 255
        ink, paper = rng.uniform(0.5, 1.0, 3), rng.uniform(0.0, 0.35, 3)
        rgb = paper + (ink - paper) * ink_map[..., None] + rng.normal(0, 0.06, (size, size, 3))
        yield rgb, f"digit_{int(raw.target[k])}"


def _synthetic_images(count: int, size: int, seed: int, classes: int = 4):
    """Noise around a class colour: cheap to make, learnable, and as costly to decode as photos."""
    rng = np.random.default_rng(seed)
    palette = rng.uniform(0.2, 0.8, (classes, 3))
    for i in range(count):
        c = i % classes
        yield palette[c] + rng.normal(0, 0.15, (size, size, 3)), f"class_{c}"


def generate_image_set(root: str | Path, count: int = 2000, size: int = 64, source: str = "digits",
                       seed: int = 0, overwrite: bool = False) -> Path:
    """Write `count` RGB PNG files (about 0.5 ms each) of `size` x `size` under `root/<class>/`; returns `root`.

    A folder that already holds the same set (same manifest) is reused, not rewritten."""
    from PIL import Image

    from ..config import ConfigError

    if count < 1:
        raise ConfigError(f"image set count must be >= 1, got {count}")
    if size < 8:
        raise ConfigError(f"image set size must be >= 8 pixels, got {size}")
    makers = {"digits": _digit_images, "synthetic": _synthetic_images}
    if source not in makers:
        raise ConfigError(f"image set source must be one of {', '.join(makers)}, got {source!r}")
    root = Path(root)
    manifest = {"count": count, "size": size, "source": source, "seed": seed, "format": "png"}
    mpath = root / MANIFEST
    if mpath.is_file() and not overwrite:
        if json.loads(mpath.read_text()) == manifest:
            return root
        raise ConfigError(f"{str(root)!r} already holds a different image set "
                          f"({mpath.read_text().strip()}); choose another folder or pass overwrite=True")
    root.mkdir(parents=True, exist_ok=True)
    for i, (rgb, cls) in enumerate(makers[source](count, size, seed)):
        folder = root / cls
        folder.mkdir(exist_ok=True)
        pixels = (np.clip(rgb, 0, 1) * 255).round().astype(np.uint8)  # H x W x 3
        Image.fromarray(pixels, "RGB").save(folder / f"{i:06d}.png", compress_level=1)  # fast to write
    mpath.write_text(json.dumps(manifest))
    return root


def list_images(root: str | Path) -> tuple[list[Path], list[int], list[str]]:
    """Files under `root/<class>/`, their labels and the class names (sorted, so labels are stable).

    Raises ConfigError when the folder does not exist or holds no images."""
    from ..config import ConfigError

    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"data.path {str(root)!r} does not exist or is not a folder; "
                          "generate one with `workbench loader make-images DIR`")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    files, labels = [], []
    for label, cls in enumerate(classes):
        for f in sorted((root / cls).iterdir()):
            if f.suffix.lower() in IMAGE_EXTENSIONS:
                files.append(f)
                labels.append(label)
    if not files:
        raise ConfigError(f"data.path {str(root)!r} holds no images: expected "
                          f"{str(root)}/<class>/<name>.png (or {', '.join(IMAGE_EXTENSIONS[1:])})")
    return files, labels, classes


def augment(x: torch.Tensor, gen: torch.Generator | None = None, pad: int = 4) -> torch.Tensor:
    """Per-sample augmentation in plain torch ops: shifted crop, horizontal flip, brightness and
    contrast jitter, then normalisation. `x` is C x H x W float in [0, 1]."""
    c, h, w = x.shape
    dy, dx = torch.randint(0, 2 * pad + 1, (2,), generator=gen).tolist()
    x = torch.nn.functional.pad(x.unsqueeze(0), (pad, pad, pad, pad), mode="reflect")[0]
    x = x[:, dy:dy + h, dx:dx + w]
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

    def __init__(self, root: str | Path, image_size: int | None = None, train: bool = True,
                 on_error: str = "raise", files=None, labels=None, classes=None):
        if on_error not in ("raise", "skip"):
            from ..config import ConfigError
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
        return ImageFolder(self.root, self.image_size, train, self.on_error,
                           [self.files[i] for i in indices], [self.labels[i] for i in indices],
                           self.classes)

    def _read(self, path: Path) -> torch.Tensor:
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(path) as img:
                img = img.convert("RGB")
                if self.image_size and img.size != (self.image_size, self.image_size):
                    img = img.resize((self.image_size, self.image_size), Image.BILINEAR)
                pixels = np.asarray(img)
        except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as e:
            raise CorruptImageError(f"cannot decode image file {str(path)!r}: {type(e).__name__}: {e}; "
                                    "delete or replace it, or use on_error='skip'") from None
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
