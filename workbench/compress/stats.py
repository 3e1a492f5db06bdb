"""What a compressed model costs: serialized size, output error against the float model, and
inference latency at several batch sizes measured side by side with the reference model.

    from workbench.compress.stats import latencies, speedup_label
    t = latencies({"dense": m1, "int8": m2}, subject, (1, 64))
    t["int8"]["speedup_b64"], t["int8"]["speedup_b64_low"], speedup_label(t["int8"], 64)

Variants are timed by the trial engine (workbench.trials.engine): slices of calls of each model,
in rounds whose order alternates, each variant's slice paired with the reference's of the same
round. A variant's speedup at a batch size is the median of its pairs' ratios with a
distribution-free interval and the one verdict rule; a busy pair is kept (both sides met the same
load), and a pair whose load changed inside it is dropped and counted. Every record also says the
thread count it was timed with, the pairs used and dropped, and the conditions (`conditions_bN`:
quiet, or what other programs held).
"""

from __future__ import annotations

import io
import os
from contextlib import contextmanager
from typing import Callable

import torch
from torch import nn

from ..machine.contention import ContentionMeter, busy_sentence
from ..trials.engine import Trial
from ..trials.calls import LocalHost
from .subject import Subject

SLICE_S = 0.1  # inference calls are short: a tenth of a second of them a slice


def state_size_bytes(model: nn.Module) -> int:
    """Bytes of the serialized state dict: what saving the model costs on disk."""
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return buf.tell()


@torch.no_grad()
def output_error(reference: nn.Module, model: nn.Module, x: torch.Tensor) -> float:
    """Largest absolute output difference relative to the reference's output range."""
    ref, out = reference(x).float(), model(x).float()
    return float((out - ref).abs().max() / ref.abs().max().clamp(min=1e-12))


def latencies(
    models: dict[str, nn.Module],
    subject: Subject,
    batch_sizes=(1, 64),
    rounds: int = 15,
    warmup: int = 3,
    threads: int | None = 1,
    stop: Callable[[], bool] | None = None,
) -> dict[str, dict]:
    """Per model and batch size: median/p10/p90 ms a call, the per-round samples (`_rounds_ms`,
    paired round by round across models) and, against the first model (the reference), the paired
    speedup with its interval, pairs, dropped pairs, conditions and verdict; plus `timing_threads`,
    `contention` and `busy`. `threads=1` by default: on a shared CPU multi-threaded int8 kernels wait for busy
    cores and swing by 100x; one thread gives steady ratios. None keeps torch's setting. `stop()`
    True ends the timing after the round under way: the rounds so far are reported, and a batch size
    not reached is not measured."""
    out: dict[str, dict] = {name: {} for name in models}
    with num_threads(threads):
        meter = ContentionMeter(os.getpid())
        _time_all(models, subject, batch_sizes, rounds, warmup, out, stop)
        seen = meter.read()
        used = torch.get_num_threads()
    for rec in out.values():
        rec.update(timing_threads=used, contention=seen, busy=bool(seen.get("busy")))
    return out


def _field(rec: dict, key: str):
    """A record's value, None when absent or NaN (a DataFrame row of another kind of variant)."""
    v = rec.get(key)
    return None if v is None or (isinstance(v, float) and v != v) else v


def speedup_label(rec: dict, batch: int, conditions: bool = True) -> str:
    """'1.31x [1.18, 1.44] over 15 pairs: faster' for one batch size of a latencies record, with the
    dropped pairs and (unless a table says it once, `conditions_line`) the load when other programs
    held cores."""
    key = f"speedup_b{batch}"
    ratio, rounds = _field(rec, key), _field(rec, f"{key}_rounds")
    if ratio is None:
        return "not measured"
    if rounds is None:
        return f"{ratio:.2f}x (the reference)"
    low, high = _field(rec, f"{key}_low"), _field(rec, f"{key}_high")
    interval = f" [{low:.2f}, {high:.2f}]" if low is not None else ""
    dropped = _field(rec, f"dropped_b{batch}")
    dropped = f", {int(dropped)} dropped" if dropped else ""
    where = _field(rec, f"conditions_b{batch}") if conditions else None
    where = f", {where}" if where and where != "quiet" else ""
    return f"{ratio:.2f}x{interval} over {int(rounds)} pairs{dropped}{where}: {rec[f'{key}_verdict']}"


def speedup_short(rec: dict, batch: int) -> str:
    """'1.31x [1.18, 1.44], 15 pairs': a chart label's form of `speedup_label`."""
    key = f"speedup_b{batch}"
    ratio, low, rounds = _field(rec, key), _field(rec, f"{key}_low"), _field(rec, f"{key}_rounds")
    if ratio is None or rounds is None:
        return f"{ratio:.2f}x" if ratio is not None else ""
    if low is None:
        return f"{ratio:.2f}x, {int(rounds)} pairs (too few for an interval)"
    return f"{ratio:.2f}x [{low:.2f}, {rec[f'{key}_high']:.2f}], {int(rounds)} pairs"


def busy_note(rec: dict) -> str:
    """What other programs did while a latencies record was timed ('' when quiet): its pairs met
    that load on both sides, so the verdicts stand, and the note says under which conditions."""
    c = rec.get("contention")
    if not c or not c.get("busy"):
        return ""
    return busy_sentence(c).replace(
        ": the comparison is unreliable", ": each pair's two sides met that load alike"
    )


def conditions_line(records) -> str:
    """The load a table's pairs met, said once above its rows ('' when every row was timed quiet)."""
    loads = [r.get("contention") for r in records if isinstance(r, dict)]
    cores = [c["other_cpu_cores"] for c in loads if isinstance(c, dict) and c.get("busy")]
    if not cores:
        return ""
    held = f"{min(cores):.1f}-{max(cores):.1f}" if max(cores) - min(cores) >= 0.05 else f"{max(cores):.1f}"
    return (
        f"timed beside other programs holding {held} cores in {len(cores)} of {len(records)} "
        "rows: each pair's two sides met that load alike, so the verdicts stand"
    )


@contextmanager
def num_threads(n: int | None):
    """torch's intra-op thread count set to `n` for a block (None: unchanged)."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _time_all(models, subject, batch_sizes, rounds, warmup, out, stop=None) -> None:
    from ..measure.timer import summarize

    with torch.inference_mode():
        for batch in batch_sizes:
            if stop is not None and stop():
                return
            x = subject.example(batch)
            calls = LocalHost({name: (lambda m=m: m(x)) for name, m in models.items()}, work=batch)
            trial = Trial(
                {name: calls for name in models},
                next(iter(models)),
                slice_s=SLICE_S,
                warmup=max(1, warmup // 3),
            ).run(rounds, stop)
            if not all(trial.slices[name] for name in models):  # stopped before a whole round
                return
            for i, name in enumerate(models):
                per_call = [s.wall_s / s.steps * 1e3 for s in trial.slices[name]]
                t = summarize(per_call)
                out[name].update(
                    {
                        f"latency_b{batch}_ms": t.median_ms,
                        f"latency_b{batch}_p10_ms": t.p10_ms,
                        f"latency_b{batch}_p90_ms": t.p90_ms,
                        f"latency_b{batch}_rounds_ms": [round(v, 5) for v in per_call],
                    }
                )
                if i == 0:
                    out[name][f"speedup_b{batch}"] = 1.0
                    continue
                c = trial.compare(name)  # pair by pair against the reference: both met one load
                out[name].update(c.ratio.as_dict(f"speedup_b{batch}"))
                out[name].update(
                    {
                        f"pairs_b{batch}": c.pairs,
                        f"dropped_b{batch}": c.dropped,
                        f"conditions_b{batch}": c.conditions,
                        f"busy_b{batch}": bool(c.busy_pairs),
                    }
                )
