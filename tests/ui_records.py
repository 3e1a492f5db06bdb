"""Step records shaped like the worker's, for feeding the UI in tests without a training run."""

from __future__ import annotations


def step_records(n: int, rank: int = 0, start: int = 1, t0: float = 1000.0, **extra) -> list[dict]:
    out = []
    for i in range(start, start + n):
        rec = {
            "event": "step",
            "t": t0 + i * 0.01,
            "rank": rank,
            "attempt": 0,
            "step": i,
            "loss": 2.0 / i,
            "step_time_ms": 10.0,
            "data_wait_ms": 4.0,
            "samples_per_s": 100.0 + rank,
        }
        if i % 5 == 1:
            rec["rss_gib"] = 0.5 + rank * 0.1
        rec.update(extra)
        out.append(rec)
    return out


def lifecycle(world_size: int = 1, t0: float = 999.0) -> list[dict]:
    return [
        {"event": e, "t": t0, "rank": r, "attempt": 0, "world_size": world_size}
        for r in range(world_size)
        for e in ("start", "ready")
    ]
