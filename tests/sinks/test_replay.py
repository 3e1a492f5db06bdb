"""Runs flow out: a tracked script's figures reach TensorBoard and MLflow live (its sinks) and
afterwards (`workbench runs export`), read back with TensorBoard's event reader and MLflow's
client, equal to the run's own records."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.config import ConfigError, RunConfig
from workbench.events import read_events

ROOT = Path(__file__).resolve().parents[2]
LOOP = Path(__file__).parents[1] / "tracked_loop.py"


@pytest.fixture
def tracked(runs_root, tmp_path):
    """A 12-step tracked run that sent its figures live to TensorBoard and MLflow as it went."""
    run_dir = runs_root / "tracked"
    live_tb, live_db = tmp_path / "live-tb", f"sqlite:///{tmp_path / 'live.db'}"
    proc = subprocess.run(
        [sys.executable, str(LOOP), "--steps", "12", "--tensorboard", str(live_tb), "--mlflow", live_db],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "WORKBENCH_RUN_DIR": str(run_dir)},
    )
    assert proc.returncode == 0, proc.stderr
    losses = [r["loss"] for r in read_events(run_dir) if r["event"] == "step"]
    assert len(losses) == 12
    return run_dir, losses, live_tb, live_db


def tensorboard_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (run,) = [p for p in log_dir.iterdir() if p.is_dir()]
    acc = EventAccumulator(str(run))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def mlflow_run(uri: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("workbench").experiment_id])
    return client, run


def test_live_sinks_and_export_carry_the_same_figures(tracked, tmp_path, capsys):
    from workbench.cli import main as cli

    run_dir, losses, live_tb, live_db = tracked
    out_tb, out_db = tmp_path / "out-tb", f"sqlite:///{tmp_path / 'out.db'}"
    assert cli(["runs", "export", str(run_dir), "--to", "tensorboard", str(out_tb)]) == 0
    assert cli(["runs", "export", str(run_dir), "--to", "mlflow", out_db]) == 0
    assert "tracked: 12 steps -> tensorboard" in capsys.readouterr().out
    for log_dir in (live_tb, out_tb):
        scalars = tensorboard_scalars(log_dir)
        assert [s for s, _ in scalars["train/loss"]] == list(range(1, 13))
        assert [v for _, v in scalars["train/loss"]] == pytest.approx(losses, rel=1e-6)
        assert len(scalars["speed/samples_per_s"]) == 12 and "memory/rss_gib" in scalars
        assert scalars["summary/steps"] == [(12, 12.0)]
    for uri in (live_db, out_db):
        client, run = mlflow_run(uri)
        history = client.get_metric_history(run.info.run_id, "train/loss")
        assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx(losses)
        assert run.data.params["steps"] == "12" and run.data.params["fail_at"] == "0"
        assert run.info.status == "FINISHED" and run.data.tags["status"] == "completed"
        assert run.data.metrics["summary.steps"] == 12
    # a damaged event line: the export leaves that step out and says so, never silently
    events = run_dir / "rank0.jsonl"
    lines = events.read_text().splitlines(keepends=True)
    step5 = next(i for i, ln in enumerate(lines) if '"event":"step"' in ln and '"step":5,' in ln)
    lines[step5] = lines[step5][:30] + "\n"
    events.write_text("".join(lines))
    assert cli(["runs", "export", str(run_dir), "--to", "tensorboard", str(tmp_path / "damaged-tb")]) == 0
    said = capsys.readouterr().out
    assert "tracked: 11 steps -> tensorboard" in said and "1 damaged event line(s) left out: " in said


def test_a_workbench_run_exports_its_config_as_parameters(runs_root, tmp_path):
    from workbench.runstore import create_run_dir
    from workbench.sinks import MlflowSink, export_run

    run_dir = create_run_dir(RunConfig.smoke().replace(**{"precision.dtype": "bf16"}))
    uri = f"sqlite:///{tmp_path / 'cfg.db'}"
    assert export_run(run_dir, MlflowSink(uri)) == 0  # never launched: no steps, its config still
    _, run = mlflow_run(uri)
    assert run.data.params["precision.dtype"] == "bf16" and run.data.params["model.name"] == "mlp"


def test_what_cannot_be_sent_is_refused_in_one_line(runs_root, capsys):
    from workbench.cli import main as cli
    from workbench.sinks.base import needs

    assert cli(["runs", "export", str(runs_root / "none"), "--to", "mlflow", "x.db"]) == 2
    assert "does not exist" in capsys.readouterr().err
    (runs_root / "empty").mkdir(parents=True)
    assert cli(["runs", "export", str(runs_root / "empty"), "--to", "mlflow", "x.db"]) == 2
    assert "is not a run folder" in capsys.readouterr().err
    assert cli(["runs", "export", str(runs_root / "empty"), "--to", "wandb", "x"]) == 2
    assert "--to 'wandb' is not a place runs go" in capsys.readouterr().err  # the target first
    with pytest.raises(
        ConfigError,
        match=r"^TensorBoard needs the not_a_package package: "
        r"pip install 'workbench\[tensorboard\]'$",
    ):
        needs("not_a_package", "tensorboard", "TensorBoard")


def test_an_mlflow_target_is_checked_before_anything_is_written(runs_root, tmp_path, capsys, monkeypatch):
    """A malformed URI, a server that does not answer and a database URI without a file are each
    one line naming what is allowed, with nothing written; `file:DIR` is the folder DIR, not a
    folder named 'file:' in the working folder."""
    from workbench.cli import main as cli
    from workbench.net import free_port
    from workbench.sinks.mlflow import tracking_uri

    monkeypatch.chdir(tmp_path)
    run_dir = runs_root / "some-run"
    for target, said in [
        ("htp://localhost:5000", "its scheme 'htp' is not one MLflow stores to"),
        (f"http://127.0.0.1:{free_port()}", "does not answer"),
        ("http://[::1", "is malformed"),
        ("sqlite:///", "names no database file"),
    ]:
        assert cli(["runs", "export", str(run_dir), "--to", "mlflow", target]) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]  # nothing written where it ran
    assert tracking_uri("file:store") == (tmp_path / "store").as_uri()
