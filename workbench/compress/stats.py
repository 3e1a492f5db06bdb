"""What a compressed model costs: serialized size, output error against the float model, and
inference latency at several batch sizes measured side by side with the reference model.

    from workbench.compress.stats import latencies, speedup_label
    t = latencies({"dense": m1, "int8": m2}, subject, (1, 64))
    t["int8"]["speedup_b64"], t["int8"]["speedup_b64_low"], speedup_label(t["int8"], 64)

Variants are timed interleaved (A B C, C B A, ...) in `rounds` rounds; each variant's speedup at a
batch size is the median of its per-round ratios to the reference with a distribution-free
interval (`workbench.measure.compare.paired_ratio`), and the one verdict rule says faster, slower
or within noise. Every record also says the thread count it was timed with and what other
programs did to the machine meanwhile (`contention`; `busy` when that makes it unreliable); a
batch size timed while other programs held the cores (`busy_bN`) gets no verdict
("withheld: busy"), only its ratio and interval.
"""
from __future__ import annotations

import io
import os
from contextlib import contextmanager

import torch
from torch import nn

from ..machine.contention import ContentionMeter, busy_sentence
from ..measure.compare import paired_ratio
from ..measure.timer import interleaved
from ..measure.verdict import WITHHELD_BUSY
from .subject import Subject


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


def latencies(models: dict[str, nn.Module], subject: Subject, batch_sizes=(1, 64), rounds: int = 15,
              warmup: int = 3, threads: int | None = 1) -> dict[str, dict]:
    """Per model and batch size: median/p10/p90 ms, the per-round samples (`_rounds_ms`, paired
    round by round across models) and, against the first model (the reference),
    the paired speedup with its interval, rounds and verdict; plus `timing_threads`, `contention`
    and `busy`. `threads=1` by default: on a shared CPU multi-threaded int8 kernels wait for busy
    cores and swing by 100x; one thread gives steady ratios. None keeps torch's setting."""
    out: dict[str, dict] = {name: {} for name in models}
    with num_threads(threads):
        meter = ContentionMeter(os.getpid())
        _time_all(models, subject, batch_sizes, rounds, warmup, out)
        seen = meter.read()
        used = torch.get_num_threads()
    for rec in out.values():
        rec.update(timing_threads=used, contention=seen, busy=bool(seen.get("busy")))
    return out


def _field(rec: dict, key: str):
    """A record's value, None when absent or NaN (a DataFrame row of another kind of variant)."""
    v = rec.get(key)
    return None if v is None or (isinstance(v, float) and v != v) else v


def speedup_label(rec: dict, batch: int) -> str:
    """'1.31x [1.18, 1.44] over 15 rounds: faster' for one batch size of a latencies record."""
    key = f"speedup_b{batch}"
    ratio, rounds = _field(rec, key), _field(rec, f"{key}_rounds")
    if ratio is None:
        return "not measured"
    if rounds is None:
        return f"{ratio:.2f}x (the reference)"
    low, high = _field(rec, f"{key}_low"), _field(rec, f"{key}_high")
    interval = f" [{low:.2f}, {high:.2f}]" if low is not None else ""
    return f"{ratio:.2f}x{interval} over {int(rounds)} rounds: {rec[f'{key}_verdict']}"


def speedup_short(rec: dict, batch: int) -> str:
    """'1.31x [1.18, 1.44], 15 rounds': a chart label's form of `speedup_label`."""
    key = f"speedup_b{batch}"
    ratio, low, rounds = _field(rec, key), _field(rec, f"{key}_low"), _field(rec, f"{key}_rounds")
    if ratio is None or rounds is None:
        return f"{ratio:.2f}x" if ratio is not None else ""
    if low is None:
        return f"{ratio:.2f}x, {int(rounds)} rounds (too few for an interval)"
    return f"{ratio:.2f}x [{low:.2f}, {rec[f'{key}_high']:.2f}], {int(rounds)} rounds"


def busy_note(rec: dict) -> str:
    """The busy-machine warning for a latencies record ('' when the machine was quiet)."""
    return busy_sentence(rec.get("contention"))


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


def _time_all(models, subject, batch_sizes, rounds, warmup, out) -> None:
    with torch.inference_mode():
        for batch in batch_sizes:
            x = subject.example(batch)
            inner = 5 if batch <= 8 else 1  # tiny calls: average a few per sample
            fns = {name: (lambda m=m: m(x)) for name, m in models.items()}
            meter = ContentionMeter(os.getpid())
            times = interleaved(fns, warmup=warmup, rounds=rounds, inner=inner)
            busy = meter.read_over()["busy"]  # a tiny model's timing can take milliseconds
            ref = times[next(iter(models))]
            for i, (name, t) in enumerate(times.items()):
                out[name].update({f"latency_b{batch}_ms": t.median_ms,
                                  f"latency_b{batch}_p10_ms": t.p10_ms,
                                  f"latency_b{batch}_p90_ms": t.p90_ms,
                                  f"latency_b{batch}_rounds_ms": [round(v, 5) for v in t.samples_ms],
                                  f"busy_b{batch}": busy})
                if i == 0:
                    out[name][f"speedup_b{batch}"] = 1.0
                else:  # round by round against the reference: drift hits both alike
                    ratio = paired_ratio(ref.samples_ms, t.samples_ms)
                    out[name].update(ratio.as_dict(f"speedup_b{batch}"))
                    if busy:  # the interval stays; the word waits for a quiet machine
                        out[name][f"speedup_b{batch}_verdict"] = WITHHELD_BUSY
