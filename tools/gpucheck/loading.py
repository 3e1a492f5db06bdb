"""Part "loading": getting data onto the GPU.

1. Copies: COPY_MIB from pageable memory, from pinned memory, and from pinned memory with
   non_blocking=True, timed interleaved (a device sync after each), in GB/s, with ratios to pageable.
2. non_blocking overlap: a step that copies a pinned batch, then does host work as long as one copy
   (a sleep standing in for preparing the next batch). A blocking copy makes the host wait for it;
   non_blocking lets the host work while the copy engine moves the batch.
3. A loader sweep on this machine's cores (workbench.loading.loader_sweep): PNG images decoded and augmented
   per sample, 0 to N workers, and pinned memory at the most workers; every batch goes to the GPU and
   trains a small CNN. Samples/s and the data-wait share per setting, speedups over 0 workers with
   intervals (SWEEP_ROUNDS interleaved rounds).
"""

from __future__ import annotations

import importlib.util
import shutil
import statistics
import tempfile
import time

import torch

from workbench.events import EVENT, SAMPLES_PER_S
from workbench.loading.imageset import generate_image_set
from workbench.loading.loader_sweep import MEASURE, LoaderSetting, grid, run_sweep
from workbench.machine.cpu import usable_cores
from workbench.measure.ratios import paired_ratio, paired_speed_ratio
from workbench.trials.calls import timed_calls
from workbench.train.images import ImageFolder
from workbench.train.models import SmallCNN

COPY_MIB, ROUNDS = 256, 8
IMAGES, IMAGE_SIZE, BATCH = 1024, 64, 64
SWEEP_ROUNDS, SWEEP_BATCHES = 6, 8


def copies(ctx, rec) -> None:
    n = COPY_MIB * 2**20 // 4
    pageable, pinned = torch.randn(n), torch.randn(n).pin_memory()
    dev = torch.empty(n, device=ctx.device)
    t = timed_calls(
        {
            "pageable": lambda: dev.copy_(pageable),
            "pinned": lambda: dev.copy_(pinned),
            "pinned non_blocking": lambda: dev.copy_(pinned, non_blocking=True),
        },
        device=ctx.device,
        warmup=2,
        rounds=ROUNDS,
    )
    gbs = {k: round(n * 4 / v.median_ms / 1e6, 2) for k, v in t.items()}
    pin = paired_ratio(t["pageable"].samples_ms, t["pinned"].samples_ms)
    nb = paired_ratio(t["pinned"].samples_ms, t["pinned non_blocking"].samples_ms)
    rec.item(
        "host-to-device copies",
        "ok",
        mib=COPY_MIB,
        gbs=gbs,
        rounds=ROUNDS,
        pinned_vs_pageable=pin.label(),
        **pin.as_dict("pinned_speedup"),
        non_blocking_vs_pinned=nb.label(),
    )

    host_s = t["pinned"].median_ms / 1e3

    def step(non_blocking: bool):
        dev.copy_(pinned, non_blocking=non_blocking)
        time.sleep(host_s)  # the host's own work; the timer syncs the device after the step

    s = timed_calls(
        {"blocking": lambda: step(False), "non_blocking": lambda: step(True)},
        device=ctx.device,
        warmup=2,
        rounds=ROUNDS,
    )
    r = paired_ratio(s["blocking"].samples_ms, s["non_blocking"].samples_ms)
    rec.item(
        "non_blocking overlap",
        "ok",
        host_work_ms=round(host_s * 1e3, 3),
        blocking_ms=s["blocking"].median_ms,
        non_blocking_ms=s["non_blocking"].median_ms,
        **r.as_dict("speedup"),
        speedup_label=r.label(),
        note="copy of a pinned batch, then host work as long as one copy (a sleep)",
    )


def gpu_step(device, classes: int):
    """A real training step on the GPU for each batch the loader hands over."""
    torch.manual_seed(0)
    net = SmallCNN(3, classes, width=32, depth=3, image_size=IMAGE_SIZE).to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)

    def step(x, y):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return step


def worker_counts(cores: int) -> list[int]:
    """0, and up to three powers of two no larger than the usable cores (the largest ones)."""
    return [0] + [w for w in (1, 2, 4, 8, 16, 32, 64) if w <= cores][-3:]


def sweep(ctx, rec) -> None:
    if importlib.util.find_spec("PIL") is None:
        rec.item(
            "loader sweep",
            "skipped",
            reason="pillow is not installed (the sweep decodes PNG files with it): pip install pillow",
        )
        return
    root = tempfile.mkdtemp(prefix="gpucheck-images-")
    try:
        generate_image_set(root, count=IMAGES, size=IMAGE_SIZE, source="synthetic")
        data = ImageFolder(root)
        cores = usable_cores()
        counts = worker_counts(cores)
        settings = grid(num_workers=counts, batch_size=(BATCH,))
        settings.append(LoaderSetting(counts[-1], BATCH, pin_memory=True))
        step = gpu_step(ctx.device, len(data.classes))
        records = list(
            run_sweep(data, settings, rounds=SWEEP_ROUNDS, max_batches=SWEEP_BATCHES, epochs=1, step=step)
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rates: dict[str, list] = {}
    waits: dict[str, list] = {}
    for r in records:
        if r.get(EVENT) == MEASURE:
            rates.setdefault(r["setting"], []).append(r[SAMPLES_PER_S])
            waits.setdefault(r["setting"], []).append(r.get("data_wait_frac"))
    base = settings[0].label
    rows = []
    for s in settings:
        ratio = paired_speed_ratio(rates[base], rates[s.label]) if s.label != base else None
        rows.append(
            {
                "setting": s.label,
                SAMPLES_PER_S: statistics.median(rates[s.label]),
                "data_wait_frac": statistics.median(waits[s.label]),
                **({"vs_0_workers": ratio.label(), **ratio.as_dict("speedup")} if ratio else {}),
            }
        )
    left = records[-1].get("leftover_processes", [])
    rec.item(
        "loader sweep",
        "failed" if left else "ok",
        cores=cores,
        images=IMAGES,
        image_size=IMAGE_SIZE,
        batch=BATCH,
        rounds=SWEEP_ROUNDS,
        batches=SWEEP_BATCHES,
        main_threads=1,
        rows=rows,
        leftover_processes=left,
        **({"reason": f"loader workers left running: {left}"} if left else {}),
    )


def run(ctx, rec) -> None:
    ctx.each(rec, (("host-to-device copies", copies), ("loader sweep", sweep)))
    rec.summary = summary(rec.items)


def summary(items: list[dict]) -> str:
    """One line for the table: the copy ratios and the fastest loader setting."""
    by = {i["name"]: i for i in items}
    parts = []
    if by.get("host-to-device copies", {}).get("pinned_vs_pageable"):
        parts.append(f"pinned vs pageable {by['host-to-device copies']['pinned_vs_pageable']}")
    if by.get("non_blocking overlap", {}).get("speedup_label"):
        parts.append(f"non_blocking {by['non_blocking overlap']['speedup_label']}")
    rows = by.get("loader sweep", {}).get("rows")
    if rows:
        best = max(rows, key=lambda r: r[SAMPLES_PER_S])
        parts.append(f"loader best {best['setting']} at {best[SAMPLES_PER_S]:,.0f} samples/s")
    failed = [f"{i['name']} {i['status']}" for i in items if i["status"] != "ok"]
    return "; ".join(parts + failed)
