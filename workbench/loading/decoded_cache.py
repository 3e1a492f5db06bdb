"""A decoded-sample cache: pay for reading and decoding once, keep augmenting per epoch.

    from workbench.loading.decoded_cache import DecodedCache
    cached = DecodedCache(ImageFolder(root), mode="memory")     # or mode="disk", cache_dir=...

The cache holds what `dataset.decode(i)` returns (uint8 pixels and the label) and calls
`dataset.finish(pixels)` on every access, so random augmentation stays random. The memory cache is
one shared-memory tensor: loader workers (forked or spawned) all fill and read the same copy, so it
costs its size once, not once per worker. The disk cache is a memory-mapped file that survives the
process and is reused by the next run over the same files. A dataset without decode/finish is
cached whole (its augmentation, if any, is then frozen at the first epoch).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ..cache import PRIVATE
from ..config import ConfigError
from ..disk import make_dirs
from ..trials.calls import timed_calls
from ..train.data import make_loader
from ..train.memory_readings import GIB, rss_gib

FIT_LIMIT = 0.8  # refuse a memory cache above this share of available RAM
WARN_LIMIT = 0.5  # warn above this share


class CacheTooLarge(ConfigError):
    """The cache would not fit in RAM (or on disk); the message says how much it needs."""


def available_ram_bytes() -> int:
    import psutil

    return psutil.virtual_memory().available


def check_fits(need: int, available: int, what: str) -> None:
    """Raise CacheTooLarge above FIT_LIMIT of `available`, warn above WARN_LIMIT."""
    if need > FIT_LIMIT * available:
        raise CacheTooLarge(
            f"{what} needs {need / GIB:.2f} GiB but only {available / GIB:.2f} GiB is "
            f"available (limit {FIT_LIMIT:.0%}); use mode='disk', fewer samples or a "
            "smaller data.image_size"
        )
    if need > WARN_LIMIT * available:
        warnings.warn(
            f"{what} takes {need / GIB:.2f} GiB, over {WARN_LIMIT:.0%} of the "
            f"{available / GIB:.2f} GiB of RAM available",
            ResourceWarning,
            stacklevel=3,
        )


class DecodedCache(Dataset):
    """Wraps a dataset; `mode` is "memory" or "disk" (then `cache_dir` is needed)."""

    def __init__(self, dataset: Dataset, mode: str = "memory", cache_dir: str | Path | None = None):
        if mode not in ("memory", "disk"):
            raise ConfigError(f"cache mode must be 'memory' or 'disk', got {mode!r}")
        if mode == "disk" and cache_dir is None:
            raise ConfigError("cache mode 'disk' needs cache_dir, a folder for the decoded file")
        self.dataset, self.mode = dataset, mode
        self._split = hasattr(dataset, "decode") and hasattr(dataset, "finish")
        first, _ = self._decode(0)
        first = torch.as_tensor(first)
        self.shape, self.dtype, n = tuple(first.shape), first.dtype, len(dataset)
        self.nbytes = n * first.numel() * first.element_size() + n * 9  # + labels and flags
        what = f"a {mode} cache of {n:,} samples of {'x'.join(map(str, self.shape))} {self.dtype}"
        if mode == "memory":
            check_fits(self.nbytes, available_ram_bytes(), what)
            self.store = torch.empty((n, *self.shape), dtype=self.dtype).share_memory_()
            self.labels = torch.zeros(n, dtype=torch.long).share_memory_()
            self.filled = torch.zeros(n, dtype=torch.bool).share_memory_()
        else:
            self.dir = Path(cache_dir) / self._key()
            make_dirs(self.dir, PRIVATE)
            if not (self.dir / "meta.json").is_file():
                check_fits(self.nbytes, shutil.disk_usage(self.dir).free, what + " on disk")
                self._create_files(n)
            self._arrays = None  # opened lazily in each process, after fork or spawn

    def _decode(self, i: int):
        if self._split:
            return self.dataset.decode(i)
        x, y = self.dataset[i]
        return x, y

    def _key(self) -> str:
        """Names the cache after the files (or dataset) and sample shape, so a changed set rebuilds."""
        files = getattr(self.dataset, "files", None)
        ident = [str(f) for f in files] if files is not None else [type(self.dataset).__name__]
        ident.append(f"{len(self.dataset)} {self.shape} {self.dtype}")
        return "decoded-" + hashlib.sha1("\n".join(ident).encode()).hexdigest()[:16]

    def _create_files(self, n: int) -> None:
        np_dtype = torch.empty(0, dtype=self.dtype).numpy().dtype
        np.lib.format.open_memmap(self.dir / "pixels.npy", "w+", np_dtype, (n, *self.shape)).flush()
        np.lib.format.open_memmap(self.dir / "labels.npy", "w+", np.int64, (n,)).flush()
        np.lib.format.open_memmap(self.dir / "filled.npy", "w+", np.bool_, (n,)).flush()
        (self.dir / "meta.json").write_text(
            json.dumps({"n": n, "shape": self.shape, "dtype": str(self.dtype)})
        )

    def _disk_arrays(self):
        if self._arrays is None:
            opened = [np.load(self.dir / f"{k}.npy", mmap_mode="r+") for k in ("pixels", "labels", "filled")]
            self._arrays = [torch.from_numpy(a) for a in opened]
        return self._arrays

    def __getstate__(self):
        state = dict(self.__dict__)
        if self.mode == "disk":  # open maps do not travel to spawned workers; they reopen
            state["_arrays"] = None
        return state

    def _tensors(self):
        return (self.store, self.labels, self.filled) if self.mode == "memory" else self._disk_arrays()

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        store, labels, filled = self._tensors()
        if not filled[i]:
            x, y = self._decode(i)
            store[i] = torch.as_tensor(x)
            labels[i] = int(y)
            filled[i] = True  # after the pixels: a reader never sees a flag before its data
        x, y = store[i].clone(), int(labels[i])
        return (self.dataset.finish(x), y) if self._split else (x, y)

    @property
    def cached_fraction(self) -> float:
        """Share of samples decoded so far, seen across every process that filled the cache."""
        return float(self._tensors()[2].float().mean())

    def clear(self) -> None:
        self._tensors()[2].zero_()


def cache_payoff(dataset: Dataset, cfg, rounds: int = 3) -> dict:
    """What the memory cache buys: the filling epoch, then uncached vs cached epochs timed in
    alternation, and the memory the cache took. Runs in this process (0 loader workers)."""
    rss_before = rss_gib()
    cached = DecodedCache(dataset, "memory")
    uncached_loader = make_loader(dataset, cfg, train=True)
    cached_loader = make_loader(cached, cfg, train=True)
    epoch = lambda loader: sum(len(x) for x, _ in loader)  # noqa: E731
    t0 = time.perf_counter()
    epoch(cached_loader)  # decodes every sample once and fills the cache
    fill_ms = (time.perf_counter() - t0) * 1e3
    res = timed_calls(
        {"uncached": lambda: epoch(uncached_loader), "cached": lambda: epoch(cached_loader)},
        warmup=0,
        rounds=rounds,
    )
    return {
        "fill_epoch_ms": fill_ms,
        "uncached_epoch_ms": res["uncached"].median_ms,
        "cached_epoch_ms": res["cached"].median_ms,
        "speedup": res["uncached"].median_ms / res["cached"].median_ms,
        "cache_mib": cached.nbytes / 2**20,
        "rss_growth_mib": (rss_gib() - rss_before) * 1024,
    }
