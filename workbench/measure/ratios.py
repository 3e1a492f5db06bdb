"""Comparing two variants honestly: the median speed ratio with an interval, and the one verdict.

    r = paired_ratio(a_ms, b_ms)          # interleaved rounds: per round, time of A / time of B
    r.ratio, r.low, r.high, r.verdict     # 1.31, 1.18, 1.44, 'faster'
    print(r.label())                      # '1.31x [1.18, 1.44] over 8 rounds: faster'

A ratio above 1 means B is faster than A. Two kinds of evidence:
- paired rounds (A B, B A, ... measured in alternation, so drift and other programs hit both):
  the interval of the median per-round ratio is distribution-free (order statistics, exact
  coverage at `CONFIDENCE`). With few rounds a bootstrap of the median is too narrow; this
  interval is honest and needs at least 6 rounds for 95 %: fewer rounds give no verdict.
- unpaired samples (the steps of two separate runs): a bootstrap of the ratio of medians. Runs
  that were not interleaved can still differ by drift; `paired=False` says so.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

from .verdict import MIN_EFFECT, UNDECIDED, verdict

CONFIDENCE = 0.95
RESAMPLES = 2000


@dataclass(frozen=True)
class Ratio:
    """A comparison's result: the median speed ratio of B over A, its interval and the verdict.

    :param ratio: the median speed of B over A, above 1 when B is faster; None: nothing was measured.
    :param low: the interval's lower end, at CONFIDENCE (95 %); None: too few samples for an interval.
    :param high: the interval's upper end; None when `low` is.
    :param rounds: the paired rounds counted, or the smaller sample of unpaired runs.
    :param verdict: "faster", "slower", "within noise", or "undecided" without an interval; None:
        nothing was measured.
    :param paired: whether the rounds were measured in alternation; False: separate runs, whose drift
        is not in the interval.
    :param note: why there is no verdict, or what to keep in mind; "": nothing to add.
    :param min_effect: the smallest relative gain (0.05: 5 %) that the verdict counts.
    """

    ratio: float | None  # median speed of B over A: above 1, B is faster
    low: float | None  # the interval at CONFIDENCE (None: too few samples for one)
    high: float | None
    rounds: int  # paired rounds, or the smaller sample for unpaired runs
    verdict: str | None
    paired: bool = True
    note: str = ""  # why there is no verdict, or what to keep in mind
    min_effect: float = MIN_EFFECT  # the smallest gain its verdict counts

    def label(self) -> str:
        """'1.31x [1.18, 1.44] over 8 rounds: faster', the form every table and chart shows."""
        if self.ratio is None:
            return "not measured"
        what = "rounds" if self.paired else "steps each"
        interval = f" [{self.low:.2f}, {self.high:.2f}]" if self.low is not None else ""
        note = f" ({self.note})" if self.note else ""
        return f"{self.ratio:.2f}x{interval} over {self.rounds} {what}: {self.verdict}{note}"

    def as_dict(self, prefix: str = "speedup") -> dict:
        r = lambda v: None if v is None else round(v, 4)  # noqa: E731
        out = {
            prefix: r(self.ratio),
            f"{prefix}_low": r(self.low),
            f"{prefix}_high": r(self.high),
            f"{prefix}_rounds": self.rounds,
            f"{prefix}_verdict": self.verdict,
        }
        if self.note:
            out[f"{prefix}_note"] = self.note
        return out


def speedup_text(ratio: float | None, low: float | None = None, high: float | None = None) -> str:
    """A table cell: '1.31x [1.18, 1.44]', or '1.31x' without an interval, '' when unmeasured."""
    if ratio is None or ratio != ratio:
        return ""
    if low is None or high is None or low != low or high != high:
        return f"{ratio:.2f}x"
    return f"{ratio:.2f}x [{low:.2f}, {high:.2f}]"


def median_interval(values: list[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The distribution-free interval of the median: [x(k), x(n-k+1)] with the largest k whose
    coverage 1 - 2 P(Binomial(n, 1/2) < k) is at least `confidence`; None when n is too small."""
    xs = sorted(values)
    n = len(xs)
    best = None
    tail = 0.0
    for k in range(1, n // 2 + 1):
        tail += math.comb(n, k - 1) / 2**n  # P(Bin(n, .5) <= k - 1)
        if 1 - 2 * tail >= confidence:
            best = k
        else:
            break
    return (xs[best - 1], xs[n - best]) if best else None


def min_rounds(confidence: float = CONFIDENCE) -> int:
    """The fewest paired rounds that can carry an interval at `confidence`."""
    return next(n for n in range(1, 64) if median_interval(list(range(n)), confidence))


def ratio_of(ratios: list[float], min_effect: float = MIN_EFFECT, paired: bool = True) -> Ratio:
    """A Ratio from per-round ratios (each above 1 when B was faster in that round)."""
    ratios = [r for r in ratios if r is not None and math.isfinite(r) and r > 0]
    if not ratios:
        return Ratio(None, None, None, 0, None, paired, "nothing was measured")
    med = statistics.median(ratios)
    interval = median_interval(ratios)
    if interval is None:
        return Ratio(
            med,
            None,
            None,
            len(ratios),
            UNDECIDED,
            paired,
            f"{len(ratios)} rounds are too few for a {CONFIDENCE:.0%} interval; use at least {min_rounds()}",
        )
    return Ratio(
        med, *interval, len(ratios), verdict(med, interval, min_effect), paired, min_effect=min_effect
    )


def paired_ratio(a_times: list[float], b_times: list[float], min_effect: float = MIN_EFFECT) -> Ratio:
    """Times (or any cost, lower is better) of A and B measured in the same rounds."""
    if len(a_times) != len(b_times):
        raise ValueError(f"paired samples need equal lengths, got {len(a_times)} and {len(b_times)}")
    return ratio_of([a / b if b else None for a, b in zip(a_times, b_times)], min_effect)


def paired_speed_ratio(a_rates: list[float], b_rates: list[float], min_effect: float = MIN_EFFECT) -> Ratio:
    """Rates (samples/s, higher is better) of A and B measured in the same rounds."""
    if len(a_rates) != len(b_rates):
        raise ValueError(f"paired samples need equal lengths, got {len(a_rates)} and {len(b_rates)}")
    return ratio_of([b / a if a else None for a, b in zip(a_rates, b_rates)], min_effect)


def unpaired_ratio(
    a_times: list[float],
    b_times: list[float],
    min_effect: float = MIN_EFFECT,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Ratio:
    """Times of A and B from separate runs (per-step times after warm-up): the ratio of medians
    with a percentile bootstrap interval. Drift between the runs is not in the interval."""
    a = [x for x in a_times if x and math.isfinite(x)]
    b = [x for x in b_times if x and math.isfinite(x)]
    if not a or not b:
        return Ratio(None, None, None, 0, None, False, "nothing was measured")
    med = statistics.median(a) / statistics.median(b)
    n = min(len(a), len(b))
    if n < 10:
        return Ratio(
            med, None, None, n, UNDECIDED, False, f"{n} steps are too few for an interval; run longer"
        )
    rng = random.Random(seed)
    boots = sorted(
        statistics.median(rng.choices(a, k=len(a))) / statistics.median(rng.choices(b, k=len(b)))
        for _ in range(resamples)
    )
    tail = (1 - CONFIDENCE) / 2
    interval = (boots[int(tail * resamples)], boots[int((1 - tail) * resamples) - 1])
    return Ratio(
        med,
        *interval,
        n,
        verdict(med, interval, min_effect),
        False,
        "separate runs, not interleaved: drift between them is not in the interval",
        min_effect,
    )
