"""The size curve's chart: each 16-bit type's ratio with its interval by side, the line of equal
speed, and a model's matmuls placed on the curve where a lesson is given."""

from __future__ import annotations

import pytest

from workbench.hardware.lessons import Lesson
from workbench.hardware.size_curve import SizeCurve
from workbench.measure.ratios import Ratio
from workbench.ui.precision_curve import size_curve_figure

CURVE = SizeCurve(
    {
        "bf16": {64: Ratio(0.3, 0.28, 0.33, 6, "slower"), 1024: Ratio(6.2, 5.9, 6.5, 6, "faster")},
        "fp16": {64: Ratio(0.3, 0.29, 0.32, 6, "slower"), 1024: Ratio(1.0, 0.95, 1.05, 6, "within noise")},
    },
    source="square matmuls measured just now, 2 thread(s), quiet",
)


def test_the_curve_and_a_models_matmuls_on_it():
    matmul = {"op": "addmm", "batch": 1, "m": 256, "k": 256, "n": 256, "flops": 2 * 256**3, "side": 256.0}
    lesson = Lesson("bf16", matmuls=[matmul], curve=CURVE, model="mlp (batch 256)")
    fig = size_curve_figure(CURVE, lesson)
    names = [t.name for t in fig.data]
    assert names == [
        "bf16 matmul over fp32",
        "fp16 matmul over fp32",
        "as fast as fp32",
        "mlp (batch 256)'s matmuls (bf16)",
        "mlp (batch 256)'s matmuls (fp16)",
    ]
    assert list(fig.data[0].error_y.array) == pytest.approx([0.03, 0.3])  # the interval, as bars
    # 256 lies halfway between 64 and 1024 on a log axis: the cross sits at the geometric middle
    assert fig.data[3].y[0] == pytest.approx((0.3 * 6.2) ** 0.5)
    assert fig.layout.xaxis.type == "log" and "quiet" in fig.layout.title.text
