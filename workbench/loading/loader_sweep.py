"""The loader sweep: every loader setting over the same data, measured interleaved.

    workbench loader sweep /tmp/digits64 --workers 0 1 2 --batch-size 32 64

For each setting it measures samples/s (after the first batch), time to the first batch of the
first and of the second epoch (where persistent workers show), and, when a training step is given,
the share of each step spent blocked on the next batch. Settings run in rounds (A B C A B C ...) so
drift on a shared machine hits them alike; a setting's figure is the median of its rounds. Each
loader's workers are shut down explicitly after use, and the sweep reports any process it left.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterator, Optional

import torch
from torch.utils.data import DataLoader, Dataset

from ..config import ConfigError, RunConfig
from ..events import EVENT, SAMPLES_PER_S
from ..machine.contention import ContentionMeter
from ..machine.cpu import usable_cores
from ..measure.ratios import Ratio, paired_speed_ratio
from ..measure.timer import summarize
from ..train.data import DataBundle, make_loader
from ..train.models import build_model, loss_fn

# The `event` of a sweep's records: one per setting and round, then one at its end.
MEASURE, SWEPT = "measure", "done"


@dataclass(frozen=True)
class LoaderSetting:
    num_workers: int = 0
    batch_size: int = 64
    pin_memory: bool = False
    prefetch_factor: Optional[int] = None
    persistent_workers: bool = False

    @property
    def label(self) -> str:
        parts = [f"{self.num_workers}w", f"b{self.batch_size}"]
        if self.prefetch_factor is not None:
            parts.append(f"pf{self.prefetch_factor}")
        if self.persistent_workers:
            parts.append("persist")
        if self.pin_memory:
            parts.append("pin")
        return " ".join(parts)

    def config_changes(self) -> dict:
        """The dotted RunConfig fields that select this setting (validated by RunConfig)."""
        return {f"loader.{k}": v for k, v in asdict(self).items()}


def grid(
    num_workers=(0, 1, 2),
    batch_size=(64,),
    pin_memory=(False,),
    prefetch_factor=(None,),
    persistent_workers=(False,),
) -> list[LoaderSetting]:
    """Every valid combination. Prefetching and persistence need workers, so the 0-worker setting
    appears once, without them; pinning is left out without a GPU (it would change nothing)."""
    for name, values in [("num_workers", num_workers), ("batch_size", batch_size)]:
        if not values:
            raise ConfigError(f"sweep {name} needs at least one value")
    settings = []
    for w, b, pin, pf, keep in itertools.product(
        num_workers, batch_size, pin_memory, prefetch_factor, persistent_workers
    ):
        if pin and not torch.cuda.is_available():
            continue
        if w == 0:
            pf, keep = None, False
        s = LoaderSetting(w, b, pin, pf, keep)
        RunConfig.smoke().replace(**s.config_changes())  # refuses negative workers, batch size 0...
        if s not in settings:
            settings.append(s)
    return settings


def shutdown_workers(loader: DataLoader, iterators: list) -> None:
    """Stop worker processes now rather than when garbage collection gets to them (a traceback or a
    notebook variable holding an iterator keeps them alive)."""
    for it in iterators + [getattr(loader, "_iterator", None)]:
        stop = getattr(it, "_shutdown_workers", None)
        if stop is not None:
            stop()
    loader._iterator = None


def measure_setting(
    dataset: Dataset,
    setting: LoaderSetting,
    max_batches: int = 20,
    epochs: int = 2,
    step: Callable | None = None,
) -> dict:
    """One measurement of one setting: `epochs` passes of up to `max_batches` batches each."""
    cfg = RunConfig.smoke().replace(**setting.config_changes())
    loader = make_loader(dataset, cfg, train=True)
    out = {"setting": setting.label, **asdict(setting)}
    iterators = []
    waits, steps, samples, steady_s = [], [], 0, 0.0
    try:
        for epoch in range(epochs):
            t0 = time.perf_counter()
            it = iter(loader)
            iterators.append(it)
            for i in range(max_batches):
                tw = time.perf_counter()
                try:
                    x, y = next(it)
                except StopIteration:
                    break
                t_got = time.perf_counter()
                if i == 0:
                    out[f"first_batch_ms_epoch{epoch + 1}"] = round((t_got - t0) * 1e3, 3)
                if step is not None:
                    step(x, y)
                t_end = time.perf_counter()
                if i > 0:  # steady state: the first batch is start-up, reported on its own
                    waits.append(t_got - tw)
                    steps.append(t_end - tw)
                    samples += len(x)
                    steady_s += t_end - tw
    finally:
        shutdown_workers(loader, iterators)
    if not samples:
        raise ConfigError(
            f"the data set ({len(dataset)} samples) gives fewer than 2 batches of "
            f"{setting.batch_size}; lower loader.batch_size or use more samples"
        )
    out[SAMPLES_PER_S] = round(samples / steady_s, 2)
    if step is not None:  # without a step the loop only waits, and the share says nothing
        out["data_wait_frac"] = round(sum(waits) / sum(steps), 4)
    out["batches"] = len(steps)
    return out


def run_sweep(
    dataset: Dataset,
    settings: list[LoaderSetting],
    rounds: int = 3,
    max_batches: int = 20,
    epochs: int = 2,
    step: Callable | None = None,
    threads: int | None = 1,
) -> Iterator[dict]:
    """Yield one record per (round, setting), interleaved; end with a record {"event": "done"}
    naming any child process still alive (it should be none).

    `threads` sets this process's torch threads while sweeping (None leaves them). Loader workers
    always run 1 thread each; at the default 1 the 0-worker setting is measured on the same terms.
    With 2+ threads on a busy machine, tiny per-sample ops can stall for tens of ms waiting for a
    descheduled pool thread, which makes 0 workers look far worse than it is."""
    import psutil

    for name, value, low in (("rounds", rounds, 1), ("max_batches", max_batches, 2), ("epochs", epochs, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"sweep {name} must be an integer >= {low}, got {value!r}")
    if not settings:
        raise ConfigError("the sweep needs at least one loader setting")
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    total = rounds * len(settings)
    old_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    used_threads = torch.get_num_threads()
    meter = ContentionMeter()  # this process and its loader workers are the measured tree
    try:
        for r in range(rounds):
            for k, setting in enumerate(settings):
                rec = measure_setting(dataset, setting, max_batches, epochs, step)
                rec.update({EVENT: MEASURE}, round=r, done=r * len(settings) + k + 1, total=total)
                yield rec
    finally:
        torch.set_num_threads(old_threads)
    deadline = time.time() + 5  # workers exit asynchronously after the shutdown request
    left = []
    while time.time() < deadline:
        left = [
            p.pid
            for p in me.children(recursive=True)
            if p.pid not in before and p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        ]
        if not left:
            break
        time.sleep(0.1)
    yield {
        EVENT: SWEPT,
        "leftover_processes": left,
        "cores": usable_cores(),
        "threads": used_threads,
        "contention": meter.read(),
    }


def summarize_sweep(records: list[dict]):
    """A DataFrame with one row per setting: medians over rounds, spread, the per-round rates
    (`rates`, in round order: round i of every setting ran side by side), and the paired ratio to
    the 0-worker setting at the same batch size with its interval."""
    import pandas as pd

    rows = {}
    for rec in records:
        if rec.get(EVENT) != MEASURE:
            continue
        rows.setdefault(rec["setting"], []).append(rec)
    table = []
    for label, recs in rows.items():
        row = {k: recs[0][k] for k in ("setting", *LoaderSetting.__dataclass_fields__)}
        rate = summarize([r[SAMPLES_PER_S] for r in recs])
        row.update(
            {SAMPLES_PER_S: rate.median_ms},
            samples_per_s_spread=round(rate.spread, 3),
            rounds=len(recs),
            rates=[r[SAMPLES_PER_S] for r in recs],
        )
        for key in ("first_batch_ms_epoch1", "first_batch_ms_epoch2", "data_wait_frac"):
            vals = [r[key] for r in recs if key in r]
            if vals:
                row[key] = summarize(vals).median_ms
        table.append(row)
    df = pd.DataFrame(table)
    base = {r["batch_size"]: r["rates"] for r in table if r["num_workers"] == 0}
    ratios = [vs_zero_workers(base.get(r["batch_size"]), r["rates"]) for r in table]
    df["speedup_vs_0_workers"] = [round(x.ratio, 3) if x else float("nan") for x in ratios]
    df["speedup_low"] = [x.low if x else None for x in ratios]
    df["speedup_high"] = [x.high if x else None for x in ratios]
    return df


def vs_zero_workers(base_rates: list | None, rates: list) -> Ratio | None:
    """The paired speed ratio of a setting over 0 workers, round by round."""
    if not base_rates:
        return None
    n = min(len(base_rates), len(rates))
    return paired_speed_ratio(base_rates[:n], rates[:n])


def train_step(
    input_shape: tuple, num_classes: int, model: str = "cnn", width: int = 32, depth: int = 3, seed: int = 0
) -> Callable:
    """A real training step (forward, backward, AdamW) in this process, for measuring how much of
    each step waits for the loader. The model is the workbench's own (`model.name`, width, depth)."""
    torch.manual_seed(seed)
    cfg = RunConfig.smoke().replace(**{"model.name": model, "model.width": width, "model.depth": depth})
    net = build_model(cfg, DataBundle(None, None, "classify", tuple(input_shape), num_classes))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    lossf = loss_fn("classify")

    def step(x, y):
        loss = lossf(net(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return step
