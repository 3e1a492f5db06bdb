"""The one trial engine: every comparison in the workbench (A/B, tune, stacking, the compression
studies, the micro-benchmarks and the benchmarks) interleaves its variants here.

    trial = Trial({"fp32": host, "bf16": host}, reference="fp32")
    trial.run(rounds=8)              # or trial.round(), one round at a time (the tune decides after each)
    c = trial.compare("bf16")        # a Comparison: the ratio, pairs used and dropped, the conditions
    print(c.text())                  # '1.72x [1.43, 1.91] over 8 pairs, quiet: faster'

A host runs slices of a variant's work (`host.slice(label, seconds) -> Slice`): a few hundred ms of
training steps inside a warm process (workbench.trials.hosts), or calls of a function in this one.
The variants run in rounds whose order alternates (A B, B A, A B, ...: A B B A A B ...), so in every
round each variant's slice runs next to the reference's and both meet the same machine; variants
that share a host run their round's slices together, their work interleaved in chunks of a few tens
of milliseconds (the host's `pair`), so they meet the same machine moment by moment. A slice
records its work, its wall time, the CPU time of the process tree that ran it and the cores other
programs held meanwhile. A round gives one pair per variant: its rate over the reference's.

Busy is paired, not discarded: both sides of a pair share the contention of their moment. A pair is
dropped only when the contention changed inside it (the two slices saw other programs hold cores
that differ by CHANGED_CORES or more) and is measured again (`run`: up to as many extra rounds as
were asked), and every comparison says how many pairs it used and dropped and under which
conditions. The first `warmup` slices of every variant pair with nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Protocol

from ..measure import claims
from ..measure.ratios import Ratio, ratio_of
from ..measure.order import order_of
from ..measure.verdict import MIN_EFFECT
from ..machine.contention import BUSY_CORES, MIN_WINDOW_S

SLICE_S = 0.3  # seconds of work a slice: long enough for the contention reading, short enough to pair
# Other programs' cores that differ this much between the two slices of a pair: the machine changed
# inside the pair (a program started or stopped), so the pair is not a like-for-like comparison.
CHANGED_CORES = 0.5
WARMUP_SLICES = 1


@dataclass
class Slice:
    """One slice of a variant's work and what the machine did meanwhile."""

    label: str
    work: float  # samples, calls or bytes: what the rate counts
    wall_s: float
    cpu_s: float  # CPU time of the process tree that ran it (its threads, loader workers, ranks)
    other_cores: float | None  # cores other programs held during it (None: not read)
    round: int = -1  # -1: a warm-up slice
    steps: int | None = None  # training steps in it, where the work is steps
    losses: list = field(default_factory=list, repr=False)  # each step's loss, in order
    threads: int | None = None

    @property
    def rate(self) -> float:
        return self.work / self.wall_s if self.wall_s > 0 else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("losses")
        return {**d, "rate": round(self.rate, 4)}


class Host(Protocol):
    def slice(self, label: str, seconds: float) -> Slice:
        """Run about `seconds` of `label`'s work and say what it did."""

    # optional: def pair(self, labels, seconds) -> dict[str, Slice]: a slice of each of `labels`,
    # their work interleaved in short chunks, so they meet the same machine moment by moment


def groups(labels: list[str], hosts: dict) -> list[list[str]]:
    """Runs of neighbouring labels on one host that can interleave them (`pair`), in order."""
    out: list[list[str]] = []
    for label in labels:
        host = hosts[label]
        if out and hosts[out[-1][0]] is host and hasattr(host, "pair"):
            out[-1].append(label)
        else:
            out.append([label])
    return out


def changed(a: Slice, b: Slice) -> bool:
    """Whether the machine changed inside a pair: both readings long enough to trust, and other
    programs' cores differing by CHANGED_CORES or more."""
    if a.other_cores is None or b.other_cores is None:
        return False
    if min(a.wall_s, b.wall_s) < MIN_WINDOW_S:  # too few clock ticks to tell a change from noise
        return False
    return abs(a.other_cores - b.other_cores) >= CHANGED_CORES


@dataclass
class Comparison:
    """A variant against the reference: the median ratio of their rates over the kept pairs."""

    label: str
    reference: str
    ratio: Ratio  # the variant's rate over the reference's: above 1, the variant is faster
    pairs: int  # pairs used
    dropped: int  # pairs whose contention changed inside them
    other_cores: list = field(default_factory=list)  # per kept pair, the larger reading
    slice_s: float = SLICE_S

    @property
    def busy_pairs(self) -> int:
        return sum(c >= BUSY_CORES for c in self.other_cores)

    @property
    def conditions(self) -> str:
        """'quiet', or 'beside other programs holding 1.2-1.9 cores in 7 of 8 pairs'."""
        if not self.other_cores or not self.busy_pairs:
            return "quiet"
        lo, hi = f"{min(self.other_cores):.1f}", f"{max(self.other_cores):.1f}"
        held = lo if lo == hi else f"{lo}-{hi}"
        return f"beside other programs holding {held} cores in {self.busy_pairs} of {self.pairs} pairs"

    @property
    def verdict(self) -> str | None:
        return self.ratio.verdict

    def text(self) -> str:
        r = self.ratio
        claims.ratio(f"{self.label} against {self.reference}", r)
        if r.ratio is None:
            return f"not measured ({self.dropped} pairs dropped)" if self.dropped else "not measured"
        interval = f" [{r.low:.2f}, {r.high:.2f}]" if r.low is not None else ""
        dropped = f", {self.dropped} dropped (the contention changed inside them)" if self.dropped else ""
        note = f" ({r.note})" if r.note else ""
        return (
            f"{r.ratio:.2f}x{interval} over {self.pairs} pairs{dropped}, {self.conditions}: {r.verdict}{note}"
        )

    def as_dict(self, prefix: str = "speedup") -> dict:
        return {
            **self.ratio.as_dict(prefix),
            f"{prefix}_pairs": self.pairs,
            f"{prefix}_dropped": self.dropped,
            f"{prefix}_conditions": self.conditions,
            f"{prefix}_label": self.text(),
        }


class Trial:
    """Variants run in alternating rounds of slices on their hosts; see the module."""

    def __init__(
        self,
        hosts: dict[str, Host],
        reference: str | None = None,
        *,
        slice_s: float = SLICE_S,
        warmup: int = WARMUP_SLICES,
        min_effect: float = MIN_EFFECT,
        on_slice: Callable[[Slice], None] | None = None,
    ):
        if len(hosts) < 1:
            raise ValueError("a trial needs at least one variant")
        self.hosts = dict(hosts)
        self.labels = list(hosts)
        self.reference = reference if reference is not None else self.labels[0]
        if self.reference not in self.hosts:
            raise ValueError(f"reference {self.reference!r} is not one of {self.labels}")
        self.slice_s, self.warmup, self.min_effect = slice_s, warmup, min_effect
        self.on_slice = on_slice
        self.slices: dict[str, list[Slice]] = {k: [] for k in self.labels}  # counted, by round
        self.warmups: dict[str, list[Slice]] = {k: [] for k in self.labels}
        self.rounds = 0

    def _slice(self, label: str, rnd: int) -> Slice:
        s = self.hosts[label].slice(label, self.slice_s)
        s.label, s.round = label, rnd
        if self.on_slice is not None:
            self.on_slice(s)
        return s

    def warm_up(self) -> None:
        """Each variant's warm-up slices, in the order of the first round: they count nowhere."""
        for label in self.labels:
            while len(self.warmups[label]) < self.warmup:
                self.warmups[label].append(self._slice(label, -1))

    def round(self) -> dict[str, Slice]:
        """One slice of every variant, the order reversed every other round; variants that share a
        host that can interleave them run their slices together, chunk by chunk."""
        self.warm_up()
        out: dict[str, Slice] = {}
        for group in groups(order_of(self.labels, self.rounds), self.hosts):
            if len(group) == 1:
                out[group[0]] = self._slice(group[0], self.rounds)
                continue
            for label, s in self.hosts[group[0]].pair(group, self.slice_s).items():
                s.label, s.round = label, self.rounds
                if self.on_slice is not None:
                    self.on_slice(s)
                out[label] = s
        for label, s in out.items():
            self.slices[label].append(s)
        self.rounds += 1
        return out

    def run(
        self,
        rounds: int,
        stop: Callable[[], bool] | None = None,
        on_round: Callable[[], None] | None = None,
    ) -> "Trial":
        """`rounds` pairs for every variant: a pair dropped because the load changed inside it is
        measured again, up to as many extra rounds as were asked (then the comparison says how
        many it kept and dropped). `on_round` is called after each round (a live table)."""
        for _ in range(rounds):
            if stop is not None and stop():
                return self
            self.round()
            if on_round is not None:
                on_round()
        extra = 0
        while extra < rounds and self._short_of(rounds):
            if stop is not None and stop():
                break
            self.round()
            if on_round is not None:
                on_round()
            extra += 1
        return self

    def _short_of(self, pairs: int) -> bool:
        """Whether some variant has fewer than `pairs` kept pairs against the reference."""
        return any(len(self.pairs(k)[0]) < pairs for k in self.labels if k != self.reference)

    def pairs(self, label: str, against: str | None = None) -> tuple[list[tuple[Slice, Slice]], int]:
        """(kept pairs of (reference slice, variant slice), pairs dropped) over the rounds so far."""
        against = against or self.reference
        kept, dropped = [], 0
        for ref, var in zip(self.slices[against], self.slices[label]):
            if changed(ref, var):
                dropped += 1
            else:
                kept.append((ref, var))
        return kept, dropped

    def pair_ratio(self, label: str, rnd: int = -1, against: str | None = None) -> float | None:
        """The ratio of one round's pair, None when it was dropped (the tune decides after each)."""
        ref, var = self.slices[against or self.reference][rnd], self.slices[label][rnd]
        if changed(ref, var) or not ref.rate:
            return None
        return var.rate / ref.rate

    def compare(self, label: str, against: str | None = None) -> Comparison:
        kept, dropped = self.pairs(label, against)
        ratio = ratio_of([v.rate / r.rate if r.rate else None for r, v in kept], self.min_effect)
        others = [max(r.other_cores or 0.0, v.other_cores or 0.0) for r, v in kept]
        return Comparison(
            label, against or self.reference, _as_pairs(ratio), len(kept), dropped, others, self.slice_s
        )

    def losses(self, label: str) -> list[float]:
        """Every step's loss of a training variant, from its first step (warm-up slices included)."""
        every = sorted(self.warmups[label] + self.slices[label], key=lambda s: s.round)
        return [v for s in every for v in s.losses]


def _as_pairs(r: Ratio) -> Ratio:
    """The measurement core counts rounds; a trial's rounds are pairs, and its note says so."""
    note = r.note.replace("rounds are too few", "pairs are too few").replace(
        "use at least", "the fewest that carry one:"
    )
    return Ratio(r.ratio, r.low, r.high, r.rounds, r.verdict, r.paired, note, r.min_effect)
