"""What a load level measured, read as its users would feel it: latency percentiles with their
intervals, throughput, and every request accounted for (sent = answered + refused + failed).

A percentile's interval is the order statistics' distribution-free one: the ranks between which
the true q-quantile lies with 95 % confidence, from the binomial distribution of how many of n
samples fall below it (normal approximation). With too few samples for a side, that side is None
and the figure is said without an interval.
"""

from __future__ import annotations

import math

Z95 = 1.959964
PERCENTILES = (50, 90, 99)


def percentile(values: list[float], q: float) -> tuple[float, float | None, float | None]:
    """The q-th percentile (0-100) of `values`, nearest rank, and its 95 % interval."""
    xs = sorted(values)
    n, p = len(xs), q / 100
    if not n:
        raise ValueError("no values")
    at = min(n - 1, max(0, math.ceil(n * p) - 1))
    spread = Z95 * math.sqrt(n * p * (1 - p))
    lo, hi = math.floor(n * p - spread) - 1, math.ceil(n * p + spread) - 1
    return xs[at], (xs[lo] if lo >= 0 else None), (xs[hi] if hi < n else None)


def summarize(latencies_s: list[float], window_s: float, sent: int, refused: int, failed: int) -> dict:
    """A level's figures: milliseconds, requests per second over the measured window."""
    answered = len(latencies_s)
    out = {
        "sent": sent,
        "answered": answered,
        "refused": refused,
        "failed": failed,
        "throughput_rps": answered / window_s if window_s > 0 else None,
    }
    for q in PERCENTILES:
        if answered:
            value, lo, hi = percentile(latencies_s, q)
            out[f"p{q}_ms"] = round(value * 1e3, 3)
            out[f"p{q}_ms_interval"] = [None if v is None else round(v * 1e3, 3) for v in (lo, hi)]
        else:
            out[f"p{q}_ms"], out[f"p{q}_ms_interval"] = None, [None, None]
    out["max_ms"] = round(max(latencies_s) * 1e3, 3) if answered else None
    return out


def with_interval(value, interval) -> str:
    if value is None:
        return "-"
    lo, hi = interval
    if lo is None or hi is None:
        return f"{value:.2f} (too few for an interval)"
    return f"{value:.2f} [{lo:.2f}, {hi:.2f}]"


def level_line(r: dict) -> str:
    """One load level in a line: its requests accounted for, throughput, p50 and p99."""
    rps = f"{r['throughput_rps']:.1f}/s" if r["throughput_rps"] else "-"
    return (
        f"{r['level']:>18}  {r['sent']:6d} sent {r['answered']:6d} answered {r['refused']:4d} refused "
        f"{r['failed']:4d} failed  {rps:>9}  p50 {with_interval(r['p50_ms'], r['p50_ms_interval'])} ms  "
        f"p99 {with_interval(r['p99_ms'], r['p99_ms_interval'])} ms"
    )
