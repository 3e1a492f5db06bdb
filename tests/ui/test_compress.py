"""The compression lab's widgets drive the real sweep and fill every chart and the table."""

from __future__ import annotations

from workbench.config import RunConfig
from workbench.compress.subject import Subject
from workbench.ui.compress import CompressLab
from workbench.compress.variants import pareto_front

from user_models import RESHAPES_BY_ATTRIBUTE


def test_lab_sweeps_compares_and_draws():
    lab = CompressLab(Subject.from_config(RunConfig.smoke()), big_batch=16, rounds=3)
    lab.points.value, lab.max_amount.value, lab.method.value = 3, 90, "structured"
    assert lab.sweep_config().amounts == [0.0, 0.45, 0.9]
    lab.max_amount.value = 50  # what a person types into the readout for 50 %
    assert lab.sweep_config().amounts[-1] == 0.5
    lab.max_amount.value = 90
    lab.sweep(wait=True)
    assert lab.status.value.startswith("sweep done (structured)") and lab.progress.value == 3
    assert "reaches 100% of the weights" in lab.acc_fig.layout.title.text.replace("<br>", " ")
    assert len(lab.acc_fig.data) == 1 and len(lab.lat_fig.data) == 4
    assert list(lab.lat_fig.data[0].x) == [0.0, 0.45, 0.9]
    lab.compare(wait=True)
    variants = lab.variants[lab.variants["verdict"] != "skipped"]
    assert len(lab.pareto_fig.data) == 1 + len(variants) and "verdict" in lab.table.value
    assert "coverage" in lab.table.value and "pairs" in lab.table.value  # speedups with intervals, pairs once
    assert "semi_structured_2_4 skipped: 2:4" in lab.table.value  # a skipped variant's reason below
    named = [t.name for t in lab.pareto_fig.data[1:]]  # each variant in the legend, with its speedup
    assert "dense" in named[0] and any("pairs" in n for n in named[1:])
    assert not lab.sweep_button.disabled
    check_variants_table(lab.variants)


def check_variants_table(df):
    """Every kind of variant is measured, 2:4 is skipped with its reason on a CPU."""
    kinds = set(df["kind"].dropna())
    assert {
        "dense",
        "masked",
        "unstructured",
        "sparse_csr",
        "structured",
        "dynamic_int8",
        "weight_only_int8",
    } <= kinds
    skipped = df[df["verdict"] == "skipped"]
    assert "semi_structured_2_4" in skipped["variant"].tolist()
    measured = df[df["verdict"] != "skipped"]
    assert measured["latency_b16_ms"].notna().all() and measured["why"].str.len().min() > 10
    assert df.loc[df["variant"] == "dynamic_int8", "converted"].iloc[0] == "3/3"
    assert pareto_front(measured, "latency_b16_ms")


def test_lab_reports_a_refused_model_in_its_status_line(tmp_path):
    (tmp_path / "res.py").write_text(RESHAPES_BY_ATTRIBUTE)
    cfg = RunConfig.smoke().replace(**{"model.name": f"{tmp_path}/res.py:build"})
    lab = CompressLab(Subject.from_config(cfg), big_batch=8, rounds=3)
    lab.method.value = "structured"
    lab.sweep(wait=True)
    assert lab.status.value.startswith("error: structured pruning of R: the pruned model no longer runs")
