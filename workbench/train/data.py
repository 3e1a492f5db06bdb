"""Built-in data, no downloads: scikit-learn's bundled digits (real data, real accuracy),
synthetic images at any size (throughput work), a synthetic text corpus for the language model,
image files on disk (data.path, e.g. made by `workbench loader make-images`) and a user's own
Dataset named by import path (data.factory).

`build_data(cfg)` returns a `DataBundle`; `make_loader` wraps a split in a real `DataLoader` that
honours every loader setting (workers, pinning, prefetching) and DDP's sharding.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler
from torch.utils.data import default_collate
from torch.utils.data.distributed import DistributedSampler

from ..config import ConfigError, RunConfig
from .digits import load_digits
from .factory import load_factory
from .images import ImageFolder, list_images


class TensorBatches(Dataset):
    """Indexed by a list of indices, returns a whole batch by one gather (no per-item collate)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, idx):
        return self.x[idx], self.y[idx]


class SampleBatches(Dataset):
    """Gives a per-sample dataset (image files, a user's Dataset) the same batch-at-a-time interface
    as TensorBatches: one loader task reads, decodes and collates a whole batch, as DataLoader's own
    batch_size path does, so workers, prefetching and the DDP sampler behave the same."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, idx):
        return default_collate([self.dataset[i] for i in idx])


@dataclass
class DataBundle:
    train: Dataset
    test: Dataset
    task: str  # "classify" or "lm"
    input_shape: tuple  # one sample, without the batch dimension
    num_classes: int  # classes, or vocabulary size for "lm"
    name: str = ""  # data.name, for messages
    # Token ids to classify: their vocabulary size, read when a model factory asks for it.
    vocab_of: Callable[[], int] | None = None


def sample_batch(dataset: Dataset, n: int = 2):
    """The first `n` samples as one batch (x, y), from any split: what the contract check runs."""
    idx = list(range(min(n, len(dataset))))
    return dataset[idx] if isinstance(dataset, TensorBatches) else SampleBatches(dataset)[idx]


def iter_batches(dataset: Dataset, batch_size: int, order=None, drop_last: bool = False):
    """(x, y) batches of any split in `order` (default: as stored), in this process: in-process
    work (scoring, a short fine-tune) reads a user's Dataset the way it reads the built-in data."""
    order = list(range(len(dataset))) if order is None else [int(i) for i in order]
    if not isinstance(dataset, TensorBatches):
        dataset = SampleBatches(dataset)
    stop = len(order) - batch_size + 1 if drop_last else len(order)
    for i in range(0, max(stop, 0), batch_size):
        yield dataset[order[i : i + batch_size]]


def _split(x: torch.Tensor, y: torch.Tensor, test_fraction: float, seed: int):
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(x), generator=g)
    n_test = max(1, int(round(len(x) * test_fraction)))
    test, train = order[:n_test], order[n_test:]
    return TensorBatches(x[train], y[train]), TensorBatches(x[test], y[test])


def digits(cfg: RunConfig) -> DataBundle:
    """1,797 real 8x8 handwritten digits shipped inside scikit-learn, scaled to [0, 1]."""
    images, y = load_digits()
    x = images.to(torch.float32).unsqueeze(1) / 16.0
    train, test = _split(x, y, cfg.data.test_fraction, seed=0)  # fixed split across runs
    return DataBundle(train, test, "classify", (1, 8, 8), 10)


def synthetic_images(cfg: RunConfig) -> DataBundle:
    """Random images whose label is a fixed random projection of a coarse view: learnable, not zeros."""
    d = cfg.data
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(d.num_samples, d.channels, d.image_size, d.image_size, generator=g)
    coarse = torch.nn.functional.adaptive_avg_pool2d(x, 4).flatten(1)
    proj = torch.randn(coarse.shape[1], d.num_classes, generator=g)
    y = (coarse @ proj).argmax(1)
    train, test = _split(x, y, d.test_fraction, seed=0)
    return DataBundle(train, test, "classify", (d.channels, d.image_size, d.image_size), d.num_classes)


_SUBJECTS = ["the cat", "a dog", "the model", "my friend", "the teacher", "a small bird", "the GPU"]
_VERBS = ["sees", "likes", "trains", "follows", "computes", "finds", "reads"]
_OBJECTS = ["the ball", "a tensor", "the loss", "some data", "the garden", "a new book", "the batch"]
_ENDS = [".", " today.", " again.", " slowly.", " in the morning."]


def synthetic_corpus(n_chars: int, seed: int = 0) -> str:
    """Sentences from a small grammar: structure a language model can learn in a few hundred steps."""
    rng = random.Random(seed)
    parts, size = [], 0
    while size < n_chars:
        s = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}{rng.choice(_ENDS)} "
        parts.append(s)
        size += len(s)
    return "".join(parts)[:n_chars]


def text(cfg: RunConfig) -> DataBundle:
    """Character-level windows of the synthetic corpus: x is a window, y the same shifted by one."""
    d = cfg.data
    corpus = synthetic_corpus(d.num_samples * 8 + d.seq_len + 1)
    vocab = sorted(set(synthetic_corpus(20000) + corpus))
    ids = torch.tensor([vocab.index(c) for c in corpus], dtype=torch.long)
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(0, len(ids) - d.seq_len - 1, (d.num_samples,), generator=g)
    windows = torch.stack([ids[s : s + d.seq_len + 1] for s in starts.tolist()])
    train, test = _split(windows[:, :-1], windows[:, 1:], d.test_fraction, seed=0)
    return DataBundle(train, test, "lm", (d.seq_len,), len(vocab))


def image_folder(cfg: RunConfig) -> DataBundle:
    """Image files under data.path (ROOT/<class>/<image>), read, decoded and augmented per sample."""
    d = cfg.data
    full = ImageFolder(d.path, image_size=d.image_size, on_error=d.on_error)
    order = torch.randperm(len(full), generator=torch.Generator().manual_seed(0)).tolist()
    n_test = max(1, int(round(len(full) * d.test_fraction)))
    train, test = full.subset(order[n_test:], train=True), full.subset(order[:n_test], train=False)
    return DataBundle(train, test, "classify", full.sample_shape, len(full.classes))


def user_dataset(cfg: RunConfig) -> DataBundle:
    """A user's Dataset from data.factory(**data.kwargs): one Dataset (split by data.test_fraction)
    or a (train, test) pair, yielding (x, label) samples. Its `classes` (a list or a count) say how
    many classes there are, else data.num_classes. Samples of token ids whose label is shaped like
    x (the next ids) make it a language model's data, with `vocab_size` from the Dataset."""
    d = cfg.data
    factory = load_factory(d.factory, field="data.factory")
    try:
        made = factory(**d.kwargs)
    except Exception as e:
        raise ConfigError(
            f"data.factory {d.factory!r}: calling it with data.kwargs={d.kwargs!r} "
            f"failed: {type(e).__name__}: {e}"
        ) from e
    if isinstance(made, (tuple, list)) and len(made) == 2:
        train, test = made
    elif isinstance(made, Dataset):
        n_test = max(1, int(round(len(made) * d.test_fraction)))
        train, test = torch.utils.data.random_split(
            made, [len(made) - n_test, n_test], generator=torch.Generator().manual_seed(0)
        )
    else:
        raise ConfigError(
            f"data.factory {d.factory!r} must return a torch Dataset or a (train, test) "
            f"pair, got {type(made).__name__}"
        )
    try:
        x, y = train[0]
    except Exception as e:
        raise ConfigError(
            f"data.factory {d.factory!r}: reading sample 0 failed: "
            f"{type(e).__name__}: {e}; a sample must be an (input tensor, label) pair"
        ) from e
    for part, value in (("input", x), ("label", y)):
        if isinstance(value, (list, tuple)):  # default_collate transposes these, it never stacks them
            raise ConfigError(
                f"data.factory {d.factory!r}: sample 0's {part} is a Python "
                f"{type(value).__name__}; return a tensor, a numpy array or a number "
                "(a list collates into a list of per-position tensors, not a batch)"
            )
    x, y = torch.as_tensor(x), torch.as_tensor(y)
    source = made if isinstance(made, Dataset) else train
    # Token ids with a label per position (y shaped like x): a language model's data.
    lm = y.dim() >= 1 and y.shape == x.shape and not x.is_floating_point()
    classes = getattr(source, "vocab_size" if lm else "classes", None)
    count = classes if isinstance(classes, int) else len(classes) if classes is not None else None
    vocab_of = None
    if not lm and x.dim() == 1 and not x.is_floating_point():  # token ids to classify
        said = getattr(source, "vocab_size", None)  # else the largest id in any sample, plus one
        vocab_of = (
            (lambda: said)
            if isinstance(said, int)
            else (
                lambda: (
                    1
                    + max(
                        int(torch.as_tensor(part[i][0]).max())
                        for part in (train, test)
                        for i in range(len(part))
                    )
                )
            )
        )
    return DataBundle(
        train, test, "lm" if lm else "classify", tuple(x.shape), count or d.num_classes, vocab_of=vocab_of
    )


BUILDERS = {
    "digits": digits,
    "synthetic_images": synthetic_images,
    "text": text,
    "image_folder": image_folder,
    "dataset": user_dataset,
}


def build_data(cfg: RunConfig) -> DataBundle:
    bundle = BUILDERS[cfg.data.name](cfg)
    bundle.name = cfg.data.name
    return bundle


def check_data_paths(cfg: RunConfig) -> None:
    """What the data needs from the disk, checked once before a launch (config validation never
    reads the disk): an image folder exists and holds ROOT/<class>/<image> files."""
    if cfg.data.name == "image_folder":
        list_images(cfg.data.path)


def make_loader(
    dataset: Dataset, cfg: RunConfig, *, train: bool, rank: int = 0, world_size: int = 1, seed: int = 0
) -> DataLoader:
    """A DataLoader yielding whole batches; each rank sees its own shard under DDP."""
    if world_size > 1:
        base = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=train, seed=seed)
    elif train:
        base = RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))
    else:
        base = SequentialSampler(dataset)
    bs = min(cfg.loader.batch_size, len(dataset) // world_size) if train else cfg.loader.batch_size
    batches = BatchSampler(base, batch_size=max(1, bs), drop_last=train)
    if not isinstance(dataset, TensorBatches):
        dataset = SampleBatches(dataset)
    lc = cfg.loader
    extra = {}
    if lc.num_workers > 0:
        extra = dict(prefetch_factor=lc.prefetch_factor, persistent_workers=lc.persistent_workers)
    return DataLoader(
        dataset,
        sampler=batches,
        batch_size=None,
        num_workers=lc.num_workers,
        pin_memory=lc.pin_memory and torch.cuda.is_available(),
        **extra,
    )
