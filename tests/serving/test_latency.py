"""A percentile and its distribution-free interval: the interval holds the true quantile about
95 % of the time, and too few samples give no interval rather than a made-up one."""

from __future__ import annotations

import random

from workbench.serving.latency import percentile, summarize


def test_the_interval_covers_the_true_percentile_about_95_percent_of_the_time():
    rnd = random.Random(1)
    covered = 0
    for _ in range(400):  # exponential latencies: the true p90 is ln(10)
        xs = [rnd.expovariate(1.0) for _ in range(300)]
        _, lo, hi = percentile(xs, 90)
        covered += lo <= 2.302585 <= hi
    assert 0.91 <= covered / 400 <= 0.99, covered


def test_too_few_samples_for_a_p99_give_no_upper_bound():
    value, lo, hi = percentile([float(i) for i in range(1, 51)], 99)
    assert value == 50.0 and hi is None


def test_every_request_is_counted_once():
    out = summarize([0.001, 0.002, 0.003], window_s=1.0, sent=5, refused=1, failed=1)
    assert (out["sent"], out["answered"], out["refused"], out["failed"]) == (5, 3, 1, 1)
    assert out["throughput_rps"] == 3.0 and out["p50_ms"] == 2.0
