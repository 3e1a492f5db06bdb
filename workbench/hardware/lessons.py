"""The precision lesson of a model: which precision to try first for the model at hand, on the
machine in front of the reader, decided by paired slices of the model's own training step and
explained by its matrix sizes against this machine's measured curve (never a proxy kept as the
machine's answer).

    lesson = precision_lesson(cfg)     # measured now, or recalled for this model and conditions
    print(lesson.text); lesson.recommend   # 'bf16', 'fp32', or None: cannot tell apart here

The measurement is a trial (workbench.trials): the config in fp32, bf16 and fp16 (where the device
runs them), built once in one warm host process with the thread rule's threads, their steps
alternating in short slices, the rounds adding pairs until every 16-bit type is decided (faster,
slower, or the same within the minimum effect) or the budget ends, and the lesson says which. The
reason comes from data: the shapes of the model's matrix products, each placed on the size curve of
this device (workbench.hardware.size_curve), and the instruction sets the CPU lists.

One lesson per model and conditions (the device, its instruction sets, torch, the threads, whether
other programs held the cores), kept with its evidence in a cache file of its own; every notebook,
the run panel and the profiler's advice read it from here, so they say the same thing. A lesson
that cannot tell the types apart is said as such, recommends nothing and is not kept: the next
reader measures again. The first answer kept for a set of conditions stands; `refresh=True`
measures again.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field


from ..cache import write_json
from ..config import RunConfig
from ..machine.capability import resolve_device, unsupported_reason
from ..machine.contention import ContentionMeter, is_busy
from ..machine.cpu import cpu_flags, flags_owner
from ..machine.conditions import cache_name, conditions, kept_under
from ..machine.peaks import load_ceilings, measured_when
from ..machine.threads import choose_threads, other_cores_now
from ..measure import claims
from ..measure.ratios import Ratio, min_rounds
from ..measure.verdict import CANNOT_TELL, FASTER, answer, decided
from ..quick import quick
from ..trials.engine import Comparison, Trial
from ..trials.hosts import TrainingHosts
from .size_curve import SIXTEEN, SizeCurve, size_curve

LESSON = "lessons/precision"  # its cache files, one per model and set of conditions
ROUNDS_MAX = 24
# Which instruction sets say why a CPU does a 16-bit type fast (names as in /proc/cpuinfo).
UNITS = {"bf16": ("amx_bf16", "avx512_bf16"), "fp16": ("amx_fp16", "avx512_fp16")}


def budget_s() -> float:
    """Seconds of slices a lesson may spend before it says it could not decide."""
    return 12.0 if quick() else 40.0


def slice_s() -> float:
    return 0.15 if quick() else 0.3


@dataclass
class Lesson:
    recommend: str | None  # the precision to try first; None: this machine cannot tell them apart
    comparisons: dict = field(default_factory=dict)  # dtype -> Comparison of its steps against fp32's
    matmuls: list = field(default_factory=list)  # the model's matrix products (train.matmul_shapes)
    curve: SizeCurve | None = None
    flags: list | None = None  # the CPU's instruction sets (None on a GPU)
    model: str = ""  # what was measured, in words
    source: str = ""  # how, when and under which load
    key: str = ""  # its cache file: one answer per model and conditions
    folder: str = ""  # the trial's folder: every slice
    stopped: str = ""  # why the rounds ended: decided, or the budget

    @property
    def answer(self) -> str:
        return self.recommend or CANNOT_TELL

    def sentences(self) -> list[str]:
        out = [
            f"{d} against fp32 on {self.model}'s training steps: {c.text()}"
            for d, c in self.comparisons.items()
        ]
        out += [why for d in self.comparisons if (why := self.why(d))]
        if self.recommend is None:
            out.append(
                f"so this machine cannot tell the precisions apart for this model ({self.stopped}): "
                "nothing is recommended, and the next lesson measures again"
            )
        elif self.recommend == "fp32":
            out.append(f"so fp32 stays the precision for this model here ({self.stopped})")
        else:
            out.append(
                f"so {self.recommend} is the precision to try first for this model here ({self.stopped})"
            )
        return out

    @property
    def text(self) -> str:
        return f"Measured on this machine ({self.source}):\n" + "\n".join(f"- {s}" for s in self.sentences())

    def why(self, dtype: str) -> str:
        """The reason, from data: where the curve says `dtype` pays on this device, where the
        model's matrix products fall on it, and the instruction sets that explain the curve."""
        c = self.comparisons.get(dtype)
        return reason(dtype, self.matmuls, self.curve, self.flags, c.ratio if c else None)

    def layers(self) -> list[dict]:
        """Each matrix product of the model's forward with its side and the curve's ratio there."""
        return place(self.matmuls, self.curve)


def units_text(dtype: str, flags: list | None) -> str:
    if flags is None:
        return ""
    units = [f.upper().replace("_", "-") for f in UNITS[dtype] if f in flags]
    return (
        f"{flags_owner()} lists {', '.join(units)}"
        if units
        else f"{flags_owner()} lists no {dtype} instructions"
    )


def _cell(r: Ratio) -> str:
    return f"{r.ratio:.2f}x" + (f" [{r.low:.2f}, {r.high:.2f}]" if r.low is not None else "")


def reason(
    dtype: str, matmuls: list, curve: SizeCurve | None, flags: list | None, measured: Ratio | None = None
) -> str:
    """'bf16 matmuls run faster than fp32 here from 256 wide (1.41x [1.3, 1.5]) to 1024 wide
    (6.20x [...]); 3 of this model's 4 matmuls (2 % of its matmul FLOPs) are narrower than 256;
    this CPU lists AMX-BF16', generated from the numbers it names."""
    if curve is None or not curve.sides(dtype):
        return ""
    sides = curve.sides(dtype)
    start = curve.faster_from(dtype)
    widest = curve.ratio(dtype, sides[-1])
    if start is None:
        where = (
            f"{dtype} matmuls are not faster than fp32 here at any measured side from {sides[0]} to "
            f"{sides[-1]} wide ({sides[-1]} wide: {_cell(widest)}, {answer(widest)})"
        )
        narrow = []
    else:
        first = curve.ratio(dtype, start)
        where = f"{dtype} matmuls run faster than fp32 here from {start} wide ({_cell(first)})"
        where += f" to {sides[-1]} wide ({_cell(widest)})" if start != sides[-1] else ""
        below = [s for s in sides if s < start]
        if below:
            where += f", and not below {start} ({below[-1]} wide: {answer(curve.ratio(dtype, below[-1]))})"
        narrow = [m for m in matmuls if m["side"] < start]
    if dtype in curve.left_out:
        where += f" (left out from {curve.left_out[dtype]})"
    parts = [where]
    if matmuls:
        total = sum(m["flops"] for m in matmuls) or 1
        if start is None:
            parts.append(f"this model's {len(matmuls)} matmuls are {_span(matmuls)} wide")
        else:
            share = sum(m["flops"] for m in narrow) / total
            parts.append(
                f"{len(narrow)} of this model's {len(matmuls)} matmuls ({share:.0%} of their FLOPs) are "
                f"narrower than {start} (they are {_span(matmuls)} wide, as square matmuls of their FLOPs)"
            )
    alone = curve.matmuls_speedup(dtype, matmuls)
    if alone is not None:
        parts.append(f"by the curve its matmuls alone would run {alone:.2f}x" + _beside(measured, alone))
    units = units_text(dtype, flags)
    if units:
        parts.append(units)
    return "; ".join(parts)


def _beside(measured: Ratio | None, alone: float) -> str:
    """How the model's measured steps compare with what its matmuls alone would gain."""
    if measured is None or measured.low is None:
        return ""
    if measured.high < alone / 1.1:
        return (
            f", and its steps measured {measured.ratio:.2f}x: the rest of the step (its other "
            f"operators, conversions, a convolution's kernels) costs more than the matmuls gain"
        )
    if measured.low > alone * 1.1:
        return f", and its steps measured {measured.ratio:.2f}x: more than its matmuls explain"
    return f", as its steps measured ({measured.ratio:.2f}x)"


def _span(matmuls: list) -> str:
    lo, hi = min(m["side"] for m in matmuls), max(m["side"] for m in matmuls)
    return f"{lo:.0f}" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}"


def place(matmuls: list, curve: SizeCurve | None) -> list[dict]:
    out = []
    for i, m in enumerate(matmuls):
        row = {
            "matmul": i,
            "op": m["op"],
            "shape": f"{m['m']}x{m['k']} @ {m['k']}x{m['n']}",
            "side": m["side"],
        }
        for d in SIXTEEN:
            near = curve.nearest(d, m["side"]) if curve is not None else None
            row[f"{d} at nearest side"] = None if near is None else f"{near}: {_cell(curve.ratio(d, near))}"
        out.append(row)
    return out


def reasons(
    cfg: RunConfig, matmuls: list, measured: dict | None = None, measure_curve: bool = True
) -> dict[str, str]:
    """Each 16-bit type the device runs -> why it pays or not for a model with these matmuls: the
    reason a tune or an A/B prints beside its own measurement of the model (`measured`: dtype ->
    the Ratio it measured, set beside what the matmuls alone would gain). Without
    `measure_curve` (a command asked to stop) only a curve kept already is read."""
    measured = measured or {}
    device = resolve_device(cfg.run.device)
    threads = choose_threads(cfg, other_cores_now()).threads
    curve = size_curve(device, threads=threads, measure=measure_curve)
    flags = sorted(cpu_flags()) if device.type == "cpu" else None
    return {
        d: reason(d, matmuls, curve, flags, measured.get(d))
        for d in SIXTEEN
        if unsupported_reason(cfg, device, d) is None
    }


def pick(comparisons: dict[str, Comparison]) -> str | None:
    """The fastest 16-bit type measured faster; fp32 when every one was decided and none is faster;
    None when some could not be told apart from fp32 (then nothing is recommended)."""
    faster = [(c.ratio.ratio, d) for d, c in comparisons.items() if c.ratio.verdict == FASTER]
    if faster:
        return max(faster)[1]
    return "fp32" if all(decided(c.ratio) for c in comparisons.values()) else None


def model_key(cfg: RunConfig) -> dict:
    """What a training step's speed depends on besides its precision and the machine."""
    d = cfg.to_dict()
    run = d.pop("run")
    d["precision"] = {k: v for k, v in d["precision"].items() if k != "dtype"}
    d["run"] = {k: run.get(k) for k in ("device", "threads", "allocator", "seed")}
    return d


def describe(cfg: RunConfig) -> str:
    m = cfg.model
    name = m.name if ":" not in m.name else m.name.rsplit("/", 1)[-1]
    return f"{name} (batch {cfg.loader.batch_size})"


def _conditions(cfg: RunConfig, device, busy: bool, threads: int) -> dict:
    digest = hashlib.sha256(json.dumps(model_key(cfg), sort_keys=True).encode()).hexdigest()[:16]
    return {**conditions(device, busy), "threads": threads, "model": digest}


def precision_lesson(
    cfg: RunConfig | None = None, *, refresh: bool = False, measure: bool = True, budget: float | None = None
) -> Lesson | None:
    """The precision lesson of `cfg`'s model (the default config's when None) on its device: recalled
    from a lesson kept for this model and conditions, or measured now (unless `measure` is False:
    then None). See the module."""
    cfg = cfg or RunConfig.default()
    device = resolve_device(cfg.run.device)
    choice = choose_threads(cfg, other_cores_now())
    now = _conditions(cfg, device, is_busy(choice.other_cpu_cores), choice.threads)
    kept = kept_under(LESSON, now, refresh)
    under = now  # the conditions its answer is kept under
    if kept is None:
        if not measure:
            return None
        meter = ContentionMeter()
        curve = size_curve(device, threads=choice.threads)  # the curve at the model's threads
        fresh = measure_lesson(cfg, device, choice, budget or budget_s())
        other = meter.read()["other_cpu_cores"]
        under = {**now, "busy": is_busy(other)}  # what it met, not what was expected
        kept = kept_under(LESSON, under, refresh)  # the load changed as it started: an answer there stands
        if kept is None:
            load = f"beside other programs holding {other:.1f} cores" if is_busy(other) else "quiet"
            fresh.update(
                curve=curve.as_dict(),
                source=f"measured {time.strftime('%Y-%m-%d %H:%M')}, {choice.threads} thread(s), {load}",
            )
            if fresh["recommend"] is not None:  # an undecided lesson is not repeated by the next reader
                write_json(cache_name(LESSON, under), {"conditions": under, **fresh})
            kept = fresh
    lesson = _lesson(kept, cfg, device, cache_name(LESSON, under))
    recomputed = pick(lesson.comparisons)
    claims.record(
        "precision lesson",
        "lesson",
        f"{lesson.answer} for {lesson.model}",
        recomputed == lesson.recommend,
        "the verdicts of its comparisons give " + (recomputed or CANNOT_TELL),
    )
    # one answer per model and conditions, whichever page asks: notebooks 01, 04 and the panel agree
    claims.same("precision lesson", "the precision to try first", lesson.key, lesson.answer)
    return lesson


def _lesson(record: dict, cfg: RunConfig, device, key: str) -> Lesson:
    comparisons = {
        d: Comparison(
            d, "fp32", Ratio(**c["ratio"]), c["pairs"], c["dropped"], c["other_cores"], c["slice_s"]
        )
        for d, c in record["comparisons"].items()
    }
    return Lesson(
        record["recommend"],
        comparisons,
        record["matmuls"],
        SizeCurve.from_dict(record["curve"]),
        sorted(cpu_flags()) if device.type == "cpu" else None,
        describe(cfg),
        record["source"],
        key,
        record["folder"],
        record["stopped"],
    )


def measure_lesson(cfg: RunConfig, device, choice, budget: float) -> dict:
    """fp32 against each 16-bit type the device runs, on the model's training step: rounds of
    interleaved slices in one warm host, pairs added until each is decided or `budget` seconds of
    rounds have passed. A plain record of the comparisons, the model's matmuls and why it stopped."""
    dtypes = ["fp32", *(d for d in SIXTEEN if unsupported_reason(cfg, device, d) is None)]
    with TrainingHosts(cfg, threads=choice.fixed()) as hosts:
        for d in dtypes:
            hosts.add(d, cfg.replace(**{"precision.dtype": d}))
        matmuls = hosts.variants["fp32"].matmuls("fp32")
        trial = Trial(hosts.of(dtypes), "fp32", slice_s=slice_s(), on_slice=hosts.record)
        t0 = time.monotonic()
        trial.run(min_rounds())
        others = dtypes[1:]

        def undecided() -> bool:
            return not all(decided(trial.compare(d).ratio) for d in others)

        while undecided() and trial.rounds < ROUNDS_MAX and time.monotonic() - t0 < budget:
            trial.round()
        spent = time.monotonic() - t0
        if not undecided():
            stopped = f"decided after {trial.rounds} rounds, {spent:.0f} s"
        elif trial.rounds >= ROUNDS_MAX:
            stopped = f"undecided after the most rounds a lesson runs, {ROUNDS_MAX}"
        else:
            stopped = f"undecided when its budget of {budget:.0f} s ran out, after {trial.rounds} rounds"
        comparisons = {d: trial.compare(d) for d in others}
        folder = str(hosts.folder)
    return {
        "recommend": pick(comparisons),
        "comparisons": {
            d: {
                "ratio": c.ratio.__dict__,
                "pairs": c.pairs,
                "dropped": c.dropped,
                "other_cores": c.other_cores,
                "slice_s": c.slice_s,
            }
            for d, c in comparisons.items()
        },
        "matmuls": matmuls,
        "measured_at": time.strftime("%Y-%m-%d %H:%M"),
        "folder": folder,
        "stopped": stopped,
    }


def ceilings_lesson(ceilings, flags: list[str] | None = None, device_type: str = "cpu") -> str:
    """What the measured ceilings say about this device, in numbers: each dtype's matmul ceiling
    against fp32's, and on a CPU the instruction sets behind the ratios."""
    compute = {c.dtype: c for c in ceilings if c.kind == "compute" and c.value == c.value}
    fp32 = compute.get("fp32")
    if fp32 is None:
        return "No fp32 matmul ceiling was measured, so there is nothing to compare with."
    parts = [
        f"{d} {c.value / fp32.value:.2f}x ({c.value:,.4g} {c.unit} at {c.size})"
        for d, c in compute.items()
        if d != "fp32"
    ]
    text = f"Measured here against fp32's {fp32.value:,.4g} {fp32.unit} ({fp32.size}): " + ", ".join(parts)
    if device_type == "cpu":
        flags = sorted(cpu_flags()) if flags is None else flags
        listed = [f.upper().replace("_", "-") for f in flags if f.startswith(("amx", "avx512"))]
        text += (
            f"; {flags_owner()} lists {', '.join(listed)}"
            if listed
            else f"; {flags_owner()} lists no AVX-512 or AMX instructions"
        )
    return text + "."


def int8_ceiling_line(device) -> str:
    """Notebook 04's int8 ceiling on this device, for notebook 03's quantized models: the bare int8
    matmul against fp32's, from the ceiling cache (`workbench hw --bench`), or how to measure it."""
    entry = load_ceilings(device)
    gflops = (entry or {}).get("compute_gflops", {})
    if "int8" not in gflops or "fp32" not in gflops:
        return (
            "no int8 ceiling is measured on this device yet: notebook 04 (or `workbench hw "
            "--bench`) measures and caches it"
        )
    ratio = gflops["int8"] / gflops["fp32"]
    return (
        f"notebook 04's ceilings on this device ({measured_when(entry)}): a bare int8 "
        f"matmul {gflops['int8']:,.0f} GOP/s against fp32's {gflops['fp32']:,.0f} GFLOP/s, "
        f"{ratio:.2f}x. A dynamically quantized Linear also quantizes its input and dequantizes "
        "its output at every call, at its own (smaller) size: its speedup is the one this "
        "notebook measures, and the two need not agree"
    )
