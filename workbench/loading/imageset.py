"""An on-disk image set the workbench generates itself (no download): PNG files in the usual
`ROOT/<class name>/<file>.png` layout, read back by `workbench.train.images.ImageFolder`.

    workbench loader make-images /tmp/digits64 --count 2000 --size 64

The images are noisy and tinted so that decoding costs what it costs for photos of that size.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..config import ConfigError
from ..disk import disk_message, write_atomic
from ..train.digits import load_digits

MANIFEST = "imageset.json"


def _digit_images(count: int, size: int, seed: int):
    """Digits from scikit-learn's bundled set, upscaled, tinted and noised so PNGs do not compress
    to nothing (decoding must cost what it costs for photos of that size)."""
    from PIL import Image

    images, targets = load_digits()
    images = images.numpy().astype(np.float64)
    rng = np.random.default_rng(seed)
    for i in range(count):
        k = i % len(images)
        small = Image.fromarray((images[k] * 15.9).astype(np.uint8), "L")
        ink_map = np.asarray(small.resize((size, size), Image.BILINEAR), dtype=np.float32) / 255
        ink, paper = rng.uniform(0.5, 1.0, 3), rng.uniform(0.0, 0.35, 3)
        rgb = paper + (ink - paper) * ink_map[..., None] + rng.normal(0, 0.06, (size, size, 3))
        yield rgb, f"digit_{int(targets[k])}"


def _synthetic_images(count: int, size: int, seed: int, classes: int = 4):
    """Noise around a class colour: cheap to make, learnable, and as costly to decode as photos."""
    rng = np.random.default_rng(seed)
    palette = rng.uniform(0.2, 0.8, (classes, 3))
    for i in range(count):
        c = i % classes
        yield palette[c] + rng.normal(0, 0.15, (size, size, 3)), f"class_{c}"


def generate_image_set(
    root: str | Path,
    count: int = 2000,
    size: int = 64,
    source: str = "digits",
    seed: int = 0,
    overwrite: bool = False,
) -> Path:
    """Write `count` RGB PNG files (about 0.5 ms each) of `size` x `size` under `root/<class>/`;
    returns `root`.

    A folder that already holds the same set (same manifest) is reused, not rewritten."""
    from PIL import Image

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
        raise ConfigError(
            f"{str(root)!r} already holds a different image set "
            f"({mpath.read_text().strip()}); choose another folder or pass overwrite=True"
        )
    try:
        root.mkdir(parents=True, exist_ok=True)
        for i, (rgb, cls) in enumerate(makers[source](count, size, seed)):
            folder = root / cls
            folder.mkdir(exist_ok=True)
            pixels = (np.clip(rgb, 0, 1) * 255).round().astype(np.uint8)  # H x W x 3
            path = folder / f"{i:06d}.png"
            try:
                Image.fromarray(pixels, "RGB").save(path, compress_level=1)  # fast to write
            except OSError:
                path.unlink(missing_ok=True)  # no half-written image is left to look like data
                raise
        write_atomic(mpath, json.dumps(manifest))
    except OSError as e:
        raise ConfigError(disk_message(root, e, "writing the image set")) from None
    return root
