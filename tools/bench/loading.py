"""Data loading on the generated image set: 2 workers vs 0, and a cached vs an uncached epoch.

    python -m tools.bench loading                      # as part of make bench
    python -m tools.bench.loading --count 2048 --size 96  # with options

Each figure is one epoch over the same PNG files (read, decode, augment, collate), timed in
alternation (0 workers, 2 workers, cached, ...) so load from other processes hits all alike; the
ratios, paired round by round with their 95 % interval and verdict, are what to read. Workers are
persistent, so the 2-worker figure is loading throughput, not process start-up (the sweep reports
start-up as the first-batch time).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

from workbench.config import RunConfig
from workbench.loading.decoded_cache import DecodedCache
from workbench.measure.ratios import paired_ratio
from workbench.loading.imageset import generate_image_set
from workbench.loading.loader_sweep import shutdown_workers
from workbench.trials.calls import timed_calls
from workbench.train.data import make_loader
from workbench.train.images import ImageFolder
from .results import recorded


def _epoch(loader):
    def run():
        n = 0
        for x, _ in loader:
            n += len(x)
        return n

    return run


@recorded("loading", "Data loading: worker processes and the decoded-sample cache")
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench loading", description=__doc__)
    p.add_argument("--count", type=int, default=1024, help="images in the set")
    p.add_argument("--size", type=int, default=64, help="image side in pixels")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--rounds", type=int, default=8, help="rounds of epochs, at least 6 for an interval")
    p.add_argument("--dir", help="image set folder (default: a temporary one)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # the main process works like one worker: compare processes, not pools
    with tempfile.TemporaryDirectory(prefix="wb-images-") as tmp:
        root = Path(args.dir or tmp) / f"digits{args.size}_{args.count}"
        t0 = time.perf_counter()
        generate_image_set(root, count=args.count, size=args.size)
        print(
            f"image set: {args.count} PNG files of {args.size}x{args.size} under {root} "
            f"({time.perf_counter() - t0:.1f} s to make or find)"
        )
        data = ImageFolder(root)
        cached = DecodedCache(data, "memory")
        base = RunConfig.smoke().replace(**{"loader.batch_size": args.batch_size})
        two = base.replace(**{"loader.num_workers": 2, "loader.persistent_workers": True})
        loaders = {
            "0 workers": make_loader(data, base, train=True),
            "2 workers": make_loader(data, two, train=True),
            "cached, 0 workers": make_loader(cached, base, train=True),
        }
        t0 = time.perf_counter()
        _epoch(loaders["cached, 0 workers"])()  # the first epoch fills the cache
        fill_s = time.perf_counter() - t0
        try:
            res = timed_calls({k: _epoch(v) for k, v in loaders.items()}, warmup=1, rounds=args.rounds)
        finally:
            for loader in loaders.values():
                shutdown_workers(loader, [])
    n = len(loaders["0 workers"]) * args.batch_size
    print(f"\n{'setting':<20} {'epoch ms':>10} {'samples/s':>10} {'spread':>7}")
    for name, t in res.items():
        print(f"{name:<20} {t.median_ms:>10.1f} {n / t.median_ms * 1e3:>10.0f} {t.spread:>7.2f}")
    zero = res["0 workers"].samples_ms
    workers = paired_ratio(zero, res["2 workers"].samples_ms)
    cache = paired_ratio(zero, res["cached, 0 workers"].samples_ms)
    print(f"\n2 workers vs 0 workers, samples/s:              {workers.label()}")
    print(f"cached vs uncached epoch (0 workers), samples/s: {cache.label()}")
    print(f"filling epoch took {fill_s * 1e3:.0f} ms; the cache holds {cached.nbytes / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
