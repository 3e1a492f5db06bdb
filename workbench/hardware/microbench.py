"""Micro-benchmarks: the ceilings of this device, measured. Matrix-multiply throughput per dtype,
device memory bandwidth, host<->device copies (pinned and pageable), all-reduce bus bandwidth.

    workbench hw --bench            # or: python -m workbench.cli hw --bench --quick

Timed with workbench.measure.timer (warm-up, device sync, samples and their 10-90 % spread) on
random data. A ceiling is what the device can do, so it is the best sample, not the median: on a
shared machine other programs only ever slow a sample down. When the spread is wide (another
program held the cores) the measurement is repeated, up to ATTEMPTS times, keeping the best; the
spread and the attempts are reported. Matmul and copy are also timed by torch.utils.benchmark.Timer
in the same run, sample by sample in alternation, as a check on our own timer.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch.utils.benchmark import Timer

from ..machine.contention import ContentionMeter
from ..trials.engine import order_of
from ..measure.timer import device_sync, measure, summarize
from ..train.precision import DTYPES
from .allreduce import run_allreduce
from .ceiling import Ceiling

MATMUL_DTYPES = ("fp32", "tf32", "bf16", "fp16", "int8")
_TORCH_DTYPES = {**DTYPES, "tf32": torch.float32, "int8": torch.int8}  # the config's map, and the rest
MIB = 2**20
# The longest one CPU matmul call may take. Only slow paths reach it (fast ones stop at max_n), and
# longer calls measured them slower, not better: bf16 under an AVX2 cap, 1,000 ms calls: 0.88 and 0.79
# GFLOP/s in 103-115 s, 250 ms calls: 2.42 and 2.44 GFLOP/s in 9 s (interleaved, 2 rounds).
CPU_CAP_MS = 250.0
WIDE = 0.25  # a spread above this means the samples were disturbed: measure again
ATTEMPTS = 3
SHRINKS = 3  # times a matmul size that ran over twice its cap is made smaller


def paired(fn: Callable, stmt: str, env: dict, device, repeats: int, warmup: int = 2):
    """Time `fn` with the workbench's timer and `stmt` (the same call) with torch.utils.benchmark,
    sample by sample in alternation, so load on a shared machine hits both alike. Returns two
    Timings. The Timer gets this process's thread count, not its default of one thread."""
    timer = Timer(stmt, globals=env, num_threads=torch.get_num_threads())
    for _ in range(warmup):
        fn()
    ours, theirs = [], []
    for i in range(repeats):  # A B, B A, A B, ...: neither timer always runs right after the other
        for which in order_of([0, 1], i):
            if which == 0:
                ours.append(measure(fn, device=device, warmup=0, repeats=1).median_ms)
            else:
                theirs.append(timer.timeit(1).median * 1e3)
    return summarize(ours), summarize(theirs)


def _rand(n: int, dtype: str, device) -> torch.Tensor:
    if dtype == "int8":
        return torch.randint(-127, 128, (n, n), dtype=torch.int8, device=device)
    return torch.randn(n, n, device=device).to(_TORCH_DTYPES[dtype])


def _matmul_fn(dtype: str) -> Callable:
    return torch._int_mm if dtype == "int8" else torch.matmul


def pick_size(
    fn: Callable, make: Callable[[int], tuple], device, cap_ms: float, max_n: int, probe_n: int = 256
) -> int:
    """The largest n (a multiple of 128, at most max_n) whose call should take under cap_ms, from the
    best of three calls at probe_n. Slow paths (fp16 matmul on most CPUs runs at well under
    1 GFLOP/s) get a small problem, fast ones a large one. A slow path can also slow down with size
    (bf16 under an AVX2 cap ran 2.4 GFLOP/s at 640 and 0.9 at 1024): a call at the chosen n that
    takes over twice the cap shrinks n again, so the sampling that follows stays bounded."""
    probe_n = min(probe_n, max_n)
    args = make(probe_n)
    t = measure(lambda: fn(*args), device=device, warmup=1, repeats=3)
    n = _fit(probe_n, max(t.p10_ms, 1e-3), cap_ms, max_n)
    for _ in range(SHRINKS):
        if n == probe_n or n == 128:
            break
        args = make(n)
        took = measure(lambda: fn(*args), device=device, warmup=0, repeats=1).median_ms
        if took <= 2 * cap_ms:
            break
        n = _fit(n, took, cap_ms, n - 128)
    return n


def _fit(n: int, ms: float, cap_ms: float, max_n: int) -> int:
    """n scaled so that a call taking `ms` at n takes cap_ms (cubic work), in 128s, 128..max_n."""
    return int(max(128, min(max_n, n * (cap_ms / ms) ** (1 / 3) // 128 * 128)))


def matmul(
    dtype: str,
    device="cpu",
    *,
    max_n: int | None = None,
    cap_ms: float = CPU_CAP_MS,
    repeats: int = 10,
    check: bool = True,
) -> Ceiling:
    """Throughput of an n x n x n matrix multiply, 2n^3 operations per call."""
    device = torch.device(device)
    if dtype not in MATMUL_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(MATMUL_DTYPES)}, got {dtype!r}")
    if dtype == "tf32" and device.type != "cuda":
        raise ValueError("tf32 is a CUDA tensor-core mode; on the CPU it is fp32")
    max_n = max_n or (8192 if device.type == "cuda" else 2048)
    fn = _matmul_fn(dtype)
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    try:
        n = pick_size(
            fn,
            lambda k: (_rand(k, dtype, device), _rand(k, dtype, device)),
            device,
            cap_ms,
            max_n,
            probe_n=1024 if device.type == "cuda" else 256,
        )
        a, b = _rand(n, dtype, device), _rand(n, dtype, device)
        ops = 2 * n**3
        t, theirs, attempts = _robust(
            lambda: fn(a, b), "fn(a, b)", {"fn": fn, "a": a, "b": b}, device, repeats, check
        )
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_before
    return Ceiling(
        f"matmul {dtype}",
        "compute",
        round(ops / t.best_ms / 1e6, 2),
        "GOP/s" if dtype == "int8" else "GFLOP/s",
        t.best_ms,
        round(t.spread, 3),
        f"{n}x{n}",
        str(device),
        dtype,
        round(ops / theirs.best_ms / 1e6, 2) if theirs else None,
        note=_attempts_note(attempts),
    )


def copy_bandwidth(device="cpu", *, mib: int = 256, repeats: int = 10, check: bool = True) -> Ceiling:
    """Device memory bandwidth of a large copy, counting bytes read plus bytes written."""
    device = torch.device(device)
    x = torch.randn(mib * MIB // 4, device=device)
    y = torch.empty_like(x)
    moved = 2 * x.numel() * 4
    t, theirs, attempts = _robust(lambda: y.copy_(x), "y.copy_(x)", {"x": x, "y": y}, device, repeats, check)
    note = "; ".join(n for n in ("read + write bytes", _attempts_note(attempts)) if n)
    return Ceiling(
        "copy",
        "bandwidth",
        round(moved / t.best_ms / 1e6, 2),
        "GB/s",
        t.best_ms,
        round(t.spread, 3),
        f"{mib} MiB",
        str(device),
        check=round(moved / theirs.best_ms / 1e6, 2) if theirs else None,
        note=note,
    )


def _robust(fn: Callable, stmt: str, env: dict, device, repeats: int, check: bool):
    """(our Timing, torch.utils.benchmark's or None, attempts): measured again while the spread is
    wide, keeping the attempt whose best sample is fastest."""
    best = None
    for attempt in range(1, ATTEMPTS + 1):
        if check:
            ours, theirs = paired(fn, stmt, env, device, repeats)
        else:
            ours, theirs = measure(fn, device=device, warmup=2, repeats=repeats), None
        if best is None or ours.best_ms < best[0].best_ms:
            best = (ours, theirs)
        if ours.spread <= WIDE:
            break
    return best[0], best[1], attempt


def _attempts_note(attempts: int) -> str:
    return f"spread above {WIDE:.0%}: measured {attempts} times, the best kept" if attempts > 1 else ""


def host_transfer(
    direction: str, pinned: bool, device="cuda", *, mib: int = 256, repeats: int = 10
) -> Ceiling:
    """Host-to-device ('h2d') or device-to-host ('d2h') bandwidth from pinned or pageable memory."""
    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
    device = torch.device(device)
    host = torch.randn(mib * MIB // 4, pin_memory=pinned)
    dev = host.to(device)
    if direction == "h2d":
        fn = lambda: dev.copy_(host, non_blocking=pinned)  # noqa: E731
    else:
        fn = lambda: host.copy_(dev, non_blocking=pinned)  # noqa: E731
    t = measure(fn, device=device, warmup=2, repeats=repeats)
    return Ceiling(
        f"{direction} {'pinned' if pinned else 'pageable'}",
        "bandwidth",
        round(host.numel() * 4 / t.median_ms / 1e6, 2),
        "GB/s",
        t.median_ms,
        round(t.spread, 3),
        f"{mib} MiB",
        str(device),
    )


def plan(device="cpu", quick: bool = False, allreduce_ranks: int = 0) -> list[tuple[str, Callable]]:
    """The benchmarks that apply to this device, as (label, thunk) pairs, in the order they run."""
    device = torch.device(device)
    gpu = device.type == "cuda"
    cap = (150.0 if quick else CPU_CAP_MS) if not gpu else 50.0  # longest one call may take
    reps = 5 if quick else 10
    mib = (64 if quick else 256) if not gpu else (256 if quick else 1024)
    max_n = (1024 if quick else 2048) if not gpu else (4096 if quick else 8192)
    steps: list[tuple[str, Callable]] = []
    for dtype in MATMUL_DTYPES:
        if dtype == "tf32" and not gpu:
            continue
        steps.append(
            (f"matmul {dtype}", lambda d=dtype: matmul(d, device, max_n=max_n, cap_ms=cap, repeats=reps))
        )
    steps.append(("copy", lambda: copy_bandwidth(device, mib=mib, repeats=reps)))
    if gpu:
        for direction in ("h2d", "d2h"):
            for pinned in (True, False):
                steps.append(
                    (
                        f"{direction} {'pinned' if pinned else 'pageable'}",
                        lambda d=direction, p=pinned: host_transfer(d, p, device, mib=mib, repeats=reps),
                    )
                )
    ranks = allreduce_ranks or (torch.cuda.device_count() if gpu else 0)
    if ranks > 1:
        steps.append(
            ("all-reduce", lambda: run_allreduce(ranks, "cuda" if gpu else "cpu", mib=64 if quick else 256))
        )
    return steps


def run_benchmarks(
    device="cpu",
    quick: bool = False,
    allreduce_ranks: int = 0,
    progress: Callable[[int, int, str], None] | None = None,
) -> list[Ceiling]:
    """Run every benchmark in `plan`; `progress(done, total, label)` is called before each and at
    the end. A benchmark the backend cannot run becomes a Ceiling with value nan and a note. Each
    ceiling carries the cores other programs held while it was measured."""
    steps = plan(device, quick, allreduce_ranks)
    out = []
    for i, (label, fn) in enumerate(steps):
        if progress:
            progress(i, len(steps), label)
        meter = ContentionMeter()
        try:
            out.append(fn())
            out[-1].other_cores = meter.read()["other_cpu_cores"]
        except (RuntimeError, NotImplementedError) as e:
            kind = "compute" if label.startswith("matmul") else "bandwidth"
            out.append(
                Ceiling(
                    label,
                    kind,
                    math.nan,
                    "GFLOP/s" if kind == "compute" else "GB/s",
                    math.nan,
                    math.nan,
                    "",
                    str(device),
                    label.split()[-1] if kind == "compute" else None,
                    note=f"not available here: {str(e).splitlines()[0][:120]}",
                )
            )
        device_sync(device)
    if progress:
        progress(len(steps), len(steps), "done")
    return out
