"""Lessons from measurement: what a precision does on the machine in front of the reader, computed
from its instruction sets (the hardware report) and a measurement taken here, never written as
prose that another machine would contradict.

    lesson = precision_lesson("cpu"); print(lesson.text); lesson.recommend   # 'bf16'

The measurement is an n x n matmul in fp32, bf16 and fp16, timed interleaved in rounds (the order
alternating), so each 16-bit type gets a speed ratio over fp32 with its interval and the one
verdict rule. It takes a second or two and carries its conditions: the device and its thread count,
the instruction sets torch may use, torch's version, and whether other programs held the cores. It
is kept in a cache file of its own for those conditions (two kernels and a CLI never overwrite each
other's) and reused only where the conditions match, a busy machine's figure only on a busy machine.
The first answer kept for a set of conditions stands (a measurement that started under other
conditions and met these recalls it), so one machine gives one answer; `refresh=True` measures
again. Every notebook, the run panel and the profiler's advice take the precision to try first from
here (`precision_lesson`), so they say the same thing on one machine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ..cache import read_json, write_json
from ..machine.capability import recommend_precision
from ..machine.contention import ContentionMeter, is_busy
from ..machine.cpu import cpu_flags, flags_owner
from ..machine.conditions import cache_name, conditions
from ..machine.peaks import load_ceilings, measured_when
from ..machine.threads import other_cores_now
from ..measure import claims
from ..measure.ratios import Ratio, paired_ratio
from ..measure.verdict import FASTER, SLOWER
from ..trials.calls import timed_calls
from ..train.precision import DTYPES

ROUNDS = 8
LESSON = "lessons/precision"  # its cache files, one per set of conditions
# Which instruction sets say why a CPU does a 16-bit type fast (names as in /proc/cpuinfo).
UNITS = {"bf16": ("amx_bf16", "avx512_bf16"), "fp16": ("amx_fp16", "avx512_fp16")}


@dataclass
class Lesson:
    recommend: str
    ratios: dict = field(default_factory=dict)  # dtype -> Ratio of its speed over fp32
    flags: list = field(default_factory=list)
    source: str = ""  # how and when it was measured
    trained: str = ""  # what an A/B of training steps measured, when one did (`after_ab`)

    def after_ab(self, dtype: str, ratio: Ratio) -> "Lesson":
        """This lesson once an A/B of a model's training steps has timed `dtype` against fp32
        (`ratio`: its speed over fp32's): a more direct measurement than a matmul, so where its
        verdict speaks it decides for that model, and the lesson says so."""
        recommend = self.recommend
        if ratio.verdict == FASTER:
            recommend = dtype
        elif ratio.verdict == SLOWER and recommend == dtype:
            recommend = "fp32"
        agrees = "agrees with" if recommend == self.recommend else "overrides"
        claims.record(
            "precision lesson after the A/B",
            "lesson",
            f"{recommend} to try first for this model",
            (ratio.verdict != FASTER or recommend == dtype)
            and (ratio.verdict != SLOWER or recommend != dtype),
            f"the A/B measured {dtype} {ratio.verdict} than fp32",
        )
        trained = (
            f"an A/B of this model's training steps measured {dtype} against fp32 at "
            f"{ratio.label()}, which {agrees} the matmul"
        )
        return Lesson(recommend, self.ratios, self.flags, self.source, trained)

    @property
    def sentences(self) -> list[str]:
        out = []
        for dtype in ("bf16", "fp16"):
            r = self.ratios.get(dtype)
            if r is None:
                continue
            units = [f for f in UNITS[dtype] if f in self.flags]
            why = (
                (
                    f"{flags_owner()} has {', '.join(u.upper().replace('_', '-') for u in units)}"
                    if units
                    else f"{flags_owner()} lists no instructions for it"
                )
                if self.flags is not None
                else ""
            )
            out.append(f"{dtype} matmul against fp32: {r.label()}" + (f"; {why}" if why else ""))
        if self.trained:
            out.append(self.trained)
            out.append(
                f"so {self.recommend} is the precision to try first for this model "
                f"(the matmul: {self.source})"
            )
            return out
        out.append(f"so {self.recommend} is the precision to try first here ({self.source})")
        return out

    @property
    def text(self) -> str:
        return "Measured on this machine: " + "; ".join(self.sentences) + "."


def measure_precisions(device="cpu", n: int | None = None, rounds: int = ROUNDS) -> dict[str, Ratio]:
    """dtype -> speed ratio over fp32 of an n x n matmul, fp32/bf16/fp16 interleaved."""
    device = torch.device(device)
    n = n or (4096 if device.type == "cuda" else 512)
    g = torch.Generator().manual_seed(0)
    mats = {
        k: [torch.randn(n, n, generator=g).to(device, dtype) for _ in range(2)] for k, dtype in DTYPES.items()
    }
    times = timed_calls(
        {k: (lambda a=a, b=b: a @ b) for k, (a, b) in mats.items()}, device=device, warmup=1, rounds=rounds
    )
    base = times["fp32"].samples_ms
    return {k: paired_ratio(base, times[k].samples_ms) for k in ("bf16", "fp16")}


def precision_lesson(device="cpu", refresh: bool = False) -> Lesson:
    """The precision lesson of this device: measured now, or recalled from a measurement taken
    under the same conditions (busy or quiet included), with the instruction sets that explain it."""
    device = torch.device(device)
    flags = sorted(cpu_flags()) if device.type == "cpu" else None
    now = conditions(device, is_busy(other_cores_now()))
    kept_under = now
    kept = _kept(now, refresh)
    if kept is None:
        meter = ContentionMeter()
        ratios = measure_precisions(device)
        other = meter.read()["other_cpu_cores"]
        when = "measured just now"
        kept_under = {**now, "busy": is_busy(other)}  # what it met, not what was expected
        # where the load changed as it started, to conditions that have their answer already, that
        # answer stands: these conditions keep one answer
        kept = _kept(kept_under, refresh)
        if kept is None:
            write_json(
                cache_name(LESSON, kept_under),
                {  # best effort: unwritable means measured again next time
                    "conditions": kept_under,
                    "measured_at": time.strftime("%Y-%m-%d %H:%M"),
                    "other_cpu_cores": round(other, 3),
                    "ratios": {k: r.__dict__ for k, r in ratios.items()},
                },
            )
    if kept is not None:
        ratios = {k: Ratio(**v) for k, v in kept["ratios"].items()}
        when, other = f"measured {kept['measured_at']}", kept["other_cpu_cores"]
    source = f"{ROUNDS} interleaved rounds of a matmul, {when}, {torch.get_num_threads()} thread(s)" + (
        f", beside other programs holding {other:.1f} cores: both sides of each round met them"
        if is_busy(other)
        else ", quiet"
    )
    lesson = Lesson(pick(ratios, device), ratios, flags, source)
    # one answer per set of conditions, whichever panel asks: notebooks 01, 04 and 07 agree
    claims.same(
        "precision lesson", "the precision to try first", cache_name(LESSON, kept_under), lesson.recommend
    )
    return lesson


def _kept(under: dict, refresh: bool) -> dict | None:
    """The answer kept for the conditions `under`, or None: none kept, or a refresh asked."""
    record = {} if refresh else read_json(cache_name(LESSON, under))
    return record if record.get("conditions") == under else None


def pick(ratios: dict[str, Ratio], device) -> str:
    """The fastest 16-bit type the measurement calls faster than fp32; on a GPU the capability rule
    decides between bf16 and fp16 where the GPU lacks one."""
    if device.type == "cuda":
        return recommend_precision(device)[0]
    faster = [(r.ratio, k) for k, r in ratios.items() if r.verdict == "faster"]
    return max(faster)[1] if faster else "fp32"


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
