"""`workbench compare`: the run store's comparison table as text or JSON, and clear errors."""

from __future__ import annotations

import json
import shutil

import pytest

from workbench.cli import main
from workbench.config import RunConfig
from workbench.distributed.launch import run


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """One real run, and a copy of its folder with the config switched to bf16 (one run is enough
    to test the table; the stacking tests compare real runs with each other)."""
    root = tmp_path_factory.mktemp("compare")
    cfg = RunConfig.smoke().replace(**{"run.steps": 4, "run.eval_batches": 1})
    summary = run(cfg, root / "fp32", timeout_s=180)
    assert summary["status"] == "completed", summary
    shutil.copytree(root / "fp32", root / "bf16")
    cfg.replace(**{"precision.dtype": "bf16"}).save(root / "bf16" / "config.json")
    return [str(root / "fp32"), str(root / "bf16")]


@pytest.mark.slow
def test_text_table(two_runs, capsys):
    assert main(["compare", *two_runs]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "speedup" in out[0] and "samples_per_s" in out[0]
    assert out[1].split()[0] == "fp32" and out[2].split()[0] == "bf16"
    assert out[1].split()[out[0].split().index("speedup")] == "1"


@pytest.mark.slow
def test_json_rows(two_runs, capsys):
    assert main(["compare", "--json", *two_runs]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["precision"] for r in rows] == ["fp32", "bf16"]
    assert rows[0]["speedup"] == rows[1]["speedup"] == 1.0 and rows[1]["samples_per_s"] > 0
    assert all(r["status"] == "completed" for r in rows)


def test_not_a_run_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "plain").mkdir()
    assert main(["compare", str(tmp_path / "plain")]) == 2
    assert "is not a run folder (no config.json inside)" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
