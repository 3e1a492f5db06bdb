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
    assert first["rounds"] >= 1 and first["outcome"]  # measured: real runs side by side
    assert decisions["channels_last"]["outcome"].startswith("cannot run here: channels_last")
    assert all(d["outcome"] for d in report["decisions"])
    tuned = RunConfig.from_dict(report["config"])  # a valid config: the baseline + what was kept
    smoke = RunConfig.smoke()
    assert tuned == (smoke.replace(**report["settings"]) if report["settings"] else smoke)
    assert (out / "train.py").is_file() and report["export"]["files"]
    assert report["spent_s"] <= 15 + 60  # the budget, and at most one round more
