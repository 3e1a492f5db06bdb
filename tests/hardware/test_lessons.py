"""The precision lesson of a model: decided by paired slices of its own training step, explained by
its matrix sizes on this machine's curve, one answer per model and conditions, and an undecided
lesson said as such and never kept."""

from __future__ import annotations

import json

import pytest

from workbench.config import RunConfig
from workbench.hardware import lessons
from workbench.hardware.size_curve import SizeCurve
from workbench.measure import claims
from workbench.measure.ratios import Ratio
from workbench.trials.engine import Comparison


def _ratio(r, low, high, verdict, rounds=8):
    return Ratio(r, low, high, rounds, verdict)


CURVE = SizeCurve(
    {
        "bf16": {
            64: _ratio(0.31, 0.30, 0.33, "slower"),
            128: _ratio(0.73, 0.72, 0.75, "slower"),
            256: _ratio(2.24, 2.2, 2.3, "faster"),
            1024: _ratio(6.2, 5.9, 6.5, "faster"),
        },
        "fp16": {64: _ratio(0.3, 0.28, 0.33, "slower"), 1024: _ratio(1.0, 0.9, 1.1, "within noise")},
    },
    {},
    2,
    "square matmuls measured just now, 2 thread(s), quiet",
)
# a model of four matmuls: two 128 x 512 x 512 (side 322), a narrow first and last layer
MATMULS = [
    {"op": "addmm", "batch": 1, "m": 128, "k": 64, "n": 512, "dtype": "float32"},
    {"op": "addmm", "batch": 1, "m": 128, "k": 512, "n": 512, "dtype": "float32"},
    {"op": "addmm", "batch": 1, "m": 128, "k": 512, "n": 512, "dtype": "float32"},
    {"op": "addmm", "batch": 1, "m": 128, "k": 512, "n": 10, "dtype": "float32"},
]
for _m in MATMULS:
    _m["flops"] = 2 * _m["m"] * _m["k"] * _m["n"]
    _m["side"] = round((_m["m"] * _m["k"] * _m["n"]) ** (1 / 3), 1)


def _record(bf16: Ratio, fp16: Ratio | None = None) -> dict:
    comparisons = {"bf16": bf16, **({"fp16": fp16} if fp16 else {})}
    cs = {d: Comparison(d, "fp32", r, r.rounds, 0, [0.0] * r.rounds) for d, r in comparisons.items()}
    return {
        "recommend": lessons.pick(cs),
        "comparisons": {
            d: {
                "ratio": c.ratio.__dict__,
                "pairs": c.pairs,
                "dropped": 0,
                "other_cores": c.other_cores,
                "slice_s": 0.3,
            }
            for d, c in cs.items()
        },
        "matmuls": MATMULS,
        "measured_at": "2026-12-06 06:00",
        "folder": "runs/trials/x",
        "stopped": "decided after 8 rounds, 9 s",
    }


@pytest.fixture
def measured(monkeypatch, private_cache):
    """The lesson's measurement replaced by `answers` in turn (a list the test fills), counted."""
    answers, calls = [], []

    def measure(cfg, device, choice, budget):
        calls.append(cfg)
        return json.loads(json.dumps(answers.pop(0)))

    monkeypatch.setattr(lessons, "measure_lesson", measure)
    monkeypatch.setattr(lessons, "size_curve", lambda device, threads=None: CURVE)
    claims.clear()
    yield answers, calls
    claims.clear()


class _Load:
    """A ContentionMeter whose reading a test sets: a busy machine without busy processes."""

    def __init__(self, other: float):
        self.other = other

    def read(self):
        return {"other_cpu_cores": self.other}


def _load(monkeypatch, at_start: float, inside: float | None = None):
    from workbench.machine.threads import choose_threads

    monkeypatch.setattr(lessons, "other_cores_now", lambda: at_start)
    monkeypatch.setattr(lessons, "choose_threads", lambda cfg, other: choose_threads(cfg, other))
    monkeypatch.setattr(lessons, "ContentionMeter", lambda: _Load(at_start if inside is None else inside))


def test_pick_recommends_only_what_was_measured_faster_and_nothing_when_undecided():
    def cs(**rs):
        return {d: Comparison(d, "fp32", r, 8, 0) for d, r in rs.items()}

    assert (
        lessons.pick(cs(bf16=_ratio(1.2, 1.1, 1.3, "faster"), fp16=_ratio(1.5, 1.3, 1.7, "faster"))) == "fp16"
    )
    assert (
        lessons.pick(cs(bf16=_ratio(0.8, 0.7, 0.9, "slower"), fp16=_ratio(1.0, 0.97, 1.03, "within noise")))
        == "fp32"
    )
    assert lessons.pick(cs(bf16=_ratio(1.1, 0.7, 1.6, "within noise"))) is None


def test_the_reason_is_generated_from_the_curve_and_the_models_matmuls():
    why = lessons.reason("bf16", MATMULS, CURVE, ["amx_bf16", "avx2"])
    assert "bf16 matmuls run faster than fp32 here from 256 wide (2.24x [2.20, 2.30])" in why
    assert "to 1024 wide (6.20x [5.90, 6.50])" in why and "not below 256 (128 wide: slower)" in why
    narrow = sum(m["flops"] for m in MATMULS[::3]) / sum(m["flops"] for m in MATMULS)
    assert f"2 of this model's 4 matmuls ({narrow:.0%} of their FLOPs) are narrower than 256" in why
    assert "lists AMX-BF16" in why
    alone = CURVE.matmuls_speedup("bf16", MATMULS)
    assert f"by the curve its matmuls alone would run {alone:.2f}x" in why and 1 < alone < 6.2
    slower = lessons.reason("bf16", MATMULS, CURVE, [], _ratio(0.6, 0.55, 0.65, "slower"))
    assert "its steps measured 0.60x: the rest of the step" in slower
    # the sentence follows the numbers: a curve with no faster side says so
    flat = SizeCurve({"bf16": {64: _ratio(0.5, 0.4, 0.6, "slower"), 1024: _ratio(0.9, 0.8, 0.97, "slower")}})
    why = lessons.reason("bf16", MATMULS, flat, ["avx2"])
    assert "not faster than fp32 here at any measured side from 64 to 1024 wide" in why
    assert "lists no bf16 instructions" in why


def test_a_decided_lesson_is_kept_per_model_and_recalled_by_every_reader(measured, monkeypatch):
    answers, calls = measured
    _load(monkeypatch, 0.0)
    answers += [_record(_ratio(1.19, 1.17, 1.23, "faster")), _record(_ratio(0.8, 0.7, 0.9, "slower"))]
    first = lessons.precision_lesson(RunConfig.default())
    again = lessons.precision_lesson(
        RunConfig.default().replace(**{"precision.dtype": "bf16", "run.steps": 7})
    )
    other_model = lessons.precision_lesson(RunConfig.default().replace(**{"model.width": 32}))
    assert len(calls) == 2  # the second reader recalled; another model is another lesson
    assert first.recommend == again.recommend == "bf16" and other_model.recommend == "fp32"
    assert "so bf16 is the precision to try first for this model here" in first.text
    assert "1.19x [1.17, 1.23] over 8 pairs, quiet: faster" in first.text
    assert first.key == again.key != other_model.key
    assert lessons.precision_lesson(RunConfig.default(), measure=False).recommend == "bf16"
    assert all(c.holds for c in claims.made())


def test_a_lesson_that_cannot_tell_apart_says_so_recommends_nothing_and_is_not_kept(measured, monkeypatch):
    answers, calls = measured
    _load(monkeypatch, 0.0)
    undecided = _record(_ratio(1.05, 0.6, 1.9, "within noise"))
    undecided["stopped"] = "undecided when its budget of 40 s ran out, after 24 rounds"
    answers += [undecided, _record(_ratio(1.3, 1.2, 1.4, "faster"))]
    first = lessons.precision_lesson(RunConfig.default())
    assert first.recommend is None and first.answer == "cannot tell apart here"
    assert "cannot tell the precisions apart for this model (undecided when its budget" in first.text
    assert lessons.precision_lesson(RunConfig.default(), measure=False) is None  # nothing kept
    assert lessons.precision_lesson(RunConfig.default()).recommend == "bf16" and len(calls) == 2


def test_busy_and_quiet_lessons_are_kept_apart_and_the_first_answer_for_a_set_of_conditions_stands(
    measured, monkeypatch, private_cache
):
    answers, calls = measured
    answers += [_record(_ratio(1.2, 1.1, 1.3, "faster")), _record(_ratio(0.8, 0.7, 0.9, "slower"))]
    answers += [_record(_ratio(1.0, 0.98, 1.02, "within noise"))]
    _load(monkeypatch, 1.5)
    busy = lessons.precision_lesson(RunConfig.default())
    _load(monkeypatch, 0.0)
    quiet = lessons.precision_lesson(RunConfig.default())
    assert "beside other programs holding 1.5 cores" in busy.source and "quiet" in quiet.source
    assert (busy.recommend, quiet.recommend) == ("bf16", "fp32")
    kept = [
        json.loads(f.read_text())["conditions"]["busy"]
        for f in (private_cache / "lessons").glob("precision-*")
    ]
    assert sorted(kept) == [False, True]
    # quiet as it starts, busy inside, where an answer is kept already: that answer stands
    monkeypatch.setattr(lessons, "kept_under", _only_after_measuring(lessons.kept_under))
    _load(monkeypatch, 0.0, inside=1.5)
    assert lessons.precision_lesson(RunConfig.default(), refresh=False).recommend == "bf16"
    assert len(calls) == 3


def _only_after_measuring(kept):
    """kept_under that finds nothing before the measurement (as if the quiet answer were not there)."""
    seen = []

    def wrapped(kind, under, refresh):
        seen.append(under)
        return None if len(seen) == 1 else kept(kind, under, refresh)

    return wrapped


def test_the_claims_check_fails_a_lesson_whose_recommendation_its_verdicts_do_not_give(measured, monkeypatch):
    answers, _ = measured
    _load(monkeypatch, 0.0)
    planted = _record(_ratio(0.8, 0.7, 0.9, "slower"))
    planted["recommend"] = "bf16"  # a falsehood: bf16 was measured slower
    answers.append(planted)
    lessons.precision_lesson(RunConfig.default())
    with pytest.raises(claims.ClaimsDisagree, match="bf16 for mlp"):
        claims.check()


def test_the_profilers_advice_and_the_panel_read_the_kept_lesson_and_measure_nothing(measured, monkeypatch):
    from workbench.profile.bound_by import advice
    from workbench.profile.profiled_run import recommended_dtype
    from workbench.ui.panel import recommendation_html

    answers, calls = measured
    _load(monkeypatch, 0.0)
    cfg = RunConfig.default()
    assert recommended_dtype(cfg) is None and calls == []
    said, changes = advice("compute", {}, "cpu", None)
    assert "not measured for this model yet" in said and changes == {"precision.dtype": "bf16"}
    assert "No precision lesson for this model" in recommendation_html(None)
    answers.append(_record(_ratio(1.19, 1.17, 1.23, "faster")))
    lesson = lessons.precision_lesson(cfg)
    assert recommended_dtype(cfg) == "bf16" and len(calls) == 1
    said, _ = advice("compute", {}, "cpu", "bf16")
    assert "measured bf16 faster than fp32 on this model's own training steps" in said
    said, _ = advice("compute", {}, "cpu", "fp32")  # fp32 stays: precision is not suggested
    assert "precision" not in said.split(";")[0]
    assert "<b>bf16</b>" in recommendation_html(lesson)


@pytest.mark.slow
def test_a_real_lesson_of_a_small_model_measures_its_steps_and_its_matmuls(private_cache):
    claims.clear()
    cfg = RunConfig.smoke()
    lesson = lessons.precision_lesson(cfg, budget=4.0)
    assert set(lesson.comparisons) >= {"bf16"} and lesson.matmuls
    assert all(c.pairs >= 6 for c in lesson.comparisons.values())
    assert lesson.stopped.startswith(("decided after", "undecided"))
    assert len(lesson.layers()) == len(lesson.matmuls) and lesson.curve.sides("bf16")
    if lesson.recommend is not None:  # decided: kept, and the next reader recalls it
        assert lessons.precision_lesson(cfg, measure=False).comparisons.keys() == lesson.comparisons.keys()
    assert all(c.holds for c in claims.made())
    claims.clear()
