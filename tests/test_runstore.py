"""The run store: folders named by time and label, listing and comparison from disk alone."""

import json

import pytest

from workbench.config import ConfigError, RunConfig
from workbench.events import EventWriter
from workbench.runstore import (
    compare,
    create_run_dir,
    list_runs,
    load_events,
    read_summary,
    write_json_atomic,
)
from workbench.train.restore import load_model


def fake_run(cfg, steps, status="completed", samples_per_s=100.0):
    """A run folder written the way the worker writes one (no training needed here)."""
    run_dir = create_run_dir(cfg)
    w = EventWriter(run_dir)
    w.write("start")
    for i in range(1, steps + 1):
        w.write("step", step=i, loss=1.0 / i, samples_per_s=samples_per_s)
    if status == "completed":
        w.write("done")
        write_json_atomic(
            run_dir / "summary.json",
            {
                "status": status,
                "samples_per_s": samples_per_s,
                "final_loss": 1.0 / steps,
                "step_time_ms_median": 1.0,
                "rss_gib": 0.5,
                "eval_accuracy": 0.9,
            },
        )
    w.close()
    return run_dir


def test_run_dirs_are_named_by_time_and_label_and_unique(runs_root):
    cfg = RunConfig.smoke().replace(**{"precision.dtype": "bf16"})
    a, b = create_run_dir(cfg), create_run_dir(cfg)
    assert a != b and a.parent == runs_root
    assert a.name.endswith("mlp-bf16") and (a / "config.json").is_file()
    labelled = create_run_dir(cfg.replace(**{"run.label": "my try #1"}))
    assert labelled.name.endswith("my-try-1")


def test_invalid_config_leaves_nothing(runs_root):
    with pytest.raises(ConfigError, match="loader.batch_size must be >= 1, got 0"):
        create_run_dir(RunConfig.smoke().replace(**{"loader.batch_size": 0}))
    with pytest.raises(ConfigError, match="must be a RunConfig"):
        create_run_dir(RunConfig.smoke().to_dict())
    assert not runs_root.exists() or not any(runs_root.iterdir())


def test_list_and_compare_after_a_restart(runs_root):
    base = fake_run(RunConfig.smoke(), 5, samples_per_s=100.0)
    fast = fake_run(RunConfig.smoke().replace(**{"precision.dtype": "bf16"}), 5, samples_per_s=150.0)
    killed = fake_run(RunConfig.smoke(), 3, status="killed")
    df = list_runs()
    assert list(df["run"]) == sorted([base.name, fast.name, killed.name])
    row = df.set_index("run").loc[killed.name]
    assert row["status"] == "running" and row["steps"] == 3  # rebuilt from events
    table = compare([base, fast])
    assert list(table["speedup"]) == [1.0, 1.5]
    assert list(table["precision"]) == ["fp32", "bf16"]
    steps = load_events([base, fast])
    assert len(steps) == 10 and set(steps["run"]) == {base.name, fast.name}


def test_summary_rebuilt_for_a_run_that_ended_in_error(runs_root):
    run_dir = create_run_dir(RunConfig.smoke())
    w = EventWriter(run_dir)
    w.write("step", step=1, loss=2.0)
    w.write("error", status="stopped")
    w.close()
    assert read_summary(run_dir)["status"] == "stopped"


def test_load_model_without_weights_says_why(runs_root):
    run_dir = fake_run(RunConfig.smoke(), 2)
    with pytest.raises(ConfigError, match="has no saved weights"):
        load_model(run_dir)
    assert json.loads((run_dir / "config.json").read_text())["run"]["steps"] == 20
