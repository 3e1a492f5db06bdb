"""`workbench tune` end to end with real runs, sized to a test: the report names every setting of
the catalog with what became of it, the recommended config is a valid config, and the export of
it is written. (The search's calibration is tests/test_tune_search.py, on a simulated device.)"""
from __future__ import annotations

import json
import subprocess
import sys

from workbench.config import RunConfig
from workbench.tune.candidates import CATALOG, NOT_TRIED


def test_a_short_tune_reports_every_setting_and_exports_what_it_recommends(tmp_path, runs_root):
    out = tmp_path / "tuned"
    cmd = [sys.executable, "-m", "workbench", "tune", "--preset", "smoke", "--budget-min", "0.25",
           "--run-s", "0.5", "--bound-by", "data", "--json", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    decisions = {d["setting"]: d for d in report["decisions"]}
    assert set(decisions) == {c.key for c in CATALOG}  # every setting, tried or not, with a reason
    assert report["bound_by"] == "data" and report["not_tried"] == NOT_TRIED
    first = report["decisions"][0]
    assert first["setting"] == "workers" and first["why"].startswith("bound by data: loader first")
    # measured: real runs side by side (beside the suite's other tests its rounds may all be busy:
    # repeated, not trusted, so it may decide nothing in this budget)
    assert first["rounds"] + first["busy_rounds"] >= 1 and first["outcome"], first
    assert decisions["channels_last"]["outcome"].startswith("cannot run here: channels_last")
    assert all(d["outcome"] for d in report["decisions"])
    tuned = RunConfig.from_dict(report["config"])  # a valid config: the baseline + what was kept
    smoke = RunConfig.smoke()
    assert tuned == (smoke.replace(**report["settings"]) if report["settings"] else smoke)
    assert (out / "train.py").is_file() and report["export"]["files"]
    assert report["spent_s"] <= 15 + 60  # the budget, and at most one round more


def test_the_panel_refuses_a_bad_budget_and_draws_each_decision(tmp_path):
    import pytest

    from workbench.config import ConfigError
    from workbench.tune.search import Decision
    from workbench.ui.tune import TunePanel

    panel = TunePanel(RunConfig.smoke(), budget_min=0)
    assert panel.run() is None and not panel.job.running  # refused before any run
    assert "must be &gt; 0" in panel.status.value
    panel._decided(Decision("bf16", True, "bound by compute: precision first",
                            "faster by more than 5%", 1.3, 1.2, 1.4, 8, 2))
    row = panel.table.value
    assert all(s in row for s in ("bf16", "kept", "1.30x [1.20, 1.40]", "faster by more than 5%"))
    with pytest.raises(ConfigError, match="nothing to export yet"):
        panel.export(tmp_path)
