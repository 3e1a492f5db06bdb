"""This device's curve of 16-bit matmul speed over fp32's by matrix side: measured as a trial of
interleaved calls, read between its sides, kept per set of conditions."""

from __future__ import annotations

from workbench.hardware import size_curve as sc
from workbench.measure.ratios import Ratio


def _r(x, verdict):
    return Ratio(x, x * 0.95, x * 1.05, 6, verdict)


def test_faster_from_is_the_narrowest_side_from_which_every_wider_one_is_faster():
    curve = sc.SizeCurve(
        {
            "bf16": {
                64: _r(1.3, "faster"),
                128: _r(0.8, "slower"),
                256: _r(2.0, "faster"),
                512: _r(3.0, "faster"),
            }
        }
    )
    assert curve.faster_from("bf16") == 256  # 64 is faster, but 128 is not: the run starts at 256
    assert curve.faster_from("fp16") is None and curve.sides("fp16") == []
    assert curve.nearest("bf16", 90) == 64 and curve.nearest("bf16", 100) == 128
    assert sc.SizeCurve.from_dict(curve.as_dict()).ratio("bf16", 256) == curve.ratio("bf16", 256)


def test_a_real_curve_interleaves_every_type_at_each_side():
    points, left_out = sc.measure_curve("cpu", sides=(16, 32), slice_s=0.01)
    assert set(points["bf16"]) == {16, 32} and left_out == {}
    assert all(r.rounds >= 6 and r.low is not None for p in points.values() for r in p.values())


class _Load:
    def __init__(self, other):
        self.other = other

    def read(self):
        return {"other_cpu_cores": self.other}


def test_the_curve_is_measured_once_per_set_of_conditions(private_cache, monkeypatch):
    measured = []
    monkeypatch.setattr(
        sc, "measure_curve", lambda device: measured.append(1) or ({"bf16": {64: _r(2.0, "faster")}}, {})
    )
    monkeypatch.setattr(sc, "other_cores_now", lambda: 0.0)
    monkeypatch.setattr(sc, "ContentionMeter", lambda: _Load(0.0))
    first, again = sc.size_curve("cpu"), sc.size_curve("cpu")
    assert len(measured) == 1 and again.ratio("bf16", 64) == first.ratio("bf16", 64)
    assert "quiet" in again.source
    monkeypatch.setattr(sc, "other_cores_now", lambda: 1.5)  # busy: a curve of its own
    monkeypatch.setattr(sc, "ContentionMeter", lambda: _Load(1.5))
    sc.size_curve("cpu")
    assert len(measured) == 2 and len(list((private_cache / "lessons").glob("size-curve-*"))) == 2


def test_a_command_asked_to_stop_measures_no_curve(private_cache, monkeypatch):
    """An interrupted tune prints its reasons from a curve kept already, never measures one (that
    took 45 s after Ctrl-C on a machine whose fp16 matmuls are emulated)."""
    measured = []
    monkeypatch.setattr(
        sc, "measure_curve", lambda device: measured.append(1) or ({"bf16": {64: _r(2.0, "faster")}}, {})
    )
    monkeypatch.setattr(sc, "other_cores_now", lambda: 0.0)
    monkeypatch.setattr(sc, "ContentionMeter", lambda: _Load(0.0))
    assert sc.size_curve("cpu", measure=False) is None and measured == []
    kept = sc.size_curve("cpu")
    assert sc.size_curve("cpu", measure=False).ratio("bf16", 64) == kept.ratio("bf16", 64)
    assert measured == [1]
