"""The stacking panel without a browser: the button runs the study on a thread, the waterfall and
the table fill in, and the export button writes the stacked config's script. The study itself is
replaced by one that replays a table (tests/stacking/test_study.py runs a real study)."""

from __future__ import annotations

from workbench.config import RunConfig
from workbench.runstore import create_run_dir
from workbench.stacking.study import COLUMNS
from workbench.ui import stacking as ui
from workbench.ui.table import STATUS_COLORS

ROWS = [
    {
        "step": "baseline",
        "status": "baseline",
        "kept": True,
        "samples_per_s": 1000.0,
        "gain_vs_prev": 1.0,
        "gain_vs_baseline": 1.0,
        "mem_held_mib": 300.0,
        "final_loss": 2.0,
        "reason": "",
    },
    {
        "step": "+ bf16",
        "status": "faster",
        "kept": True,
        "samples_per_s": 1500.0,
        "gain_vs_prev": 1.5,
        "gain_vs_baseline": 1.5,
        "mem_held_mib": 310.0,
        "final_loss": 2.01,
        "reason": "",
    },
    {
        "step": "+ pinned memory",
        "status": "skipped",
        "kept": False,
        "samples_per_s": None,
        "gain_vs_prev": None,
        "gain_vs_baseline": None,
        "mem_held_mib": None,
        "final_loss": None,
        "reason": "pin_memory needs a GPU",
    },
]


def test_panel_runs_a_study_and_exports(tmp_path, monkeypatch):
    import pandas as pd

    cfg = RunConfig.smoke()
    run_dirs = [str(create_run_dir(cfg)), str(create_run_dir(cfg.replace(**{"precision.dtype": "bf16"})))]
    rows = [{**r, "step_time_ms": None, "note": "", "run_dir": d} for r, d in zip(ROWS, run_dirs + [None])]
    asked = []

    def replay(baseline, changes, rounds, on_update, stop):
        asked.append([c.key for c in changes])
        for n in range(1, len(rows) + 1):
            on_update(pd.DataFrame(rows[:n], columns=COLUMNS))
        out = pd.DataFrame(rows, columns=COLUMNS)
        out.attrs.update(kept={"precision.dtype": "bf16"}, product=1.5, best_run_dir=run_dirs[1])
        return out

    monkeypatch.setattr(ui, "run_study", replay)
    panel = ui.StackingPanel(cfg, selected=["bf16", "pin_memory"], export_dir=str(tmp_path / "exported"))
    assert panel.export_button.disabled
    panel.run_button.click()
    df = panel.wait(timeout=60)
    assert asked == [["bf16", "pin_memory"]] and len(df) == 3
    waterfall = panel.fig.data[0]
    assert list(waterfall.base) == [0.0, 1000.0, 1500.0, 0.0]
    assert list(waterfall.y) == [1000.0, 500.0, 0.0, 1500.0]
    assert list(waterfall.marker.color) == [
        STATUS_COLORS[s] for s in ("baseline", rows[1]["status"], "skipped", "baseline")
    ]
    assert "pin_memory needs a GPU" in waterfall.hovertext[2] and waterfall.text[2] == ""  # why: on hover
    assert list(panel.fig.data[1].y)[:2] == [300.0, 310.0]
    assert "skipped" in panel.table.value and "kept + bf16: 1.50x the baseline" in panel.status.value
    assert not panel.export_button.disabled
    panel.export_button.click()
    assert (tmp_path / "exported" / "train.py").is_file()
    assert "'bf16'" in (tmp_path / "exported" / "train.py").read_text()
    assert "python train.py" in panel.export_out.value
    assert "the baseline with what was measured faster: precision.dtype=bf16" in panel.export_out.value


def test_the_panel_runs_its_list_in_the_order_given_and_shows_that_plan():
    panel = ui.StackingPanel(RunConfig.smoke(), selected=["workers", "bf16"])
    assert [c.key for c in panel.selected_changes()] == ["workers", "bf16"]
    assert list(panel.plan()["step"])[1:] == [c.label for c in panel.selected_changes()]
    panel.boxes["channels_last"].value = True  # ticked later: tried after the list
    assert [c.key for c in panel.selected_changes()] == ["workers", "bf16", "channels_last"]


def test_a_step_up_within_noise_is_coloured_as_noise_not_as_a_gain():
    import pandas as pd
    import pytest

    df = pd.DataFrame(
        [
            {
                "step": "baseline",
                "status": "baseline",
                "samples_per_s": 100.0,
                "gain_vs_prev": 1.0,
                "gain_vs_baseline": 1.0,
                "reason": "",
            },
            {
                "step": "+ bf16",
                "status": "within noise",
                "samples_per_s": 103.0,
                "gain_vs_prev": 1.03,
                "gain_vs_baseline": 1.03,
                "reason": "",
            },
        ]
    )
    bars = ui.waterfall_figure(df).data[0]
    assert list(bars.marker.color) == [
        STATUS_COLORS["baseline"],
        STATUS_COLORS["within noise"],
        STATUS_COLORS["baseline"],
    ]
    # not kept: the total stays at the baseline
    assert list(bars.y) == pytest.approx([100.0, 3.0, 100.0]) and list(bars.base) == [0.0, 100.0, 0.0]
