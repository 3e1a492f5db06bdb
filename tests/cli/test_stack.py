"""`workbench stack`: the stacking study from a terminal, with real runs sized to a test, and its
refusals of bad arguments in one line before any run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from workbench.compress.subject import Subject
from workbench.stacking.waterfall_text import study_text


def workbench(*args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "workbench", "stack", *args], capture_output=True, text=True, timeout=timeout
    )


def test_a_short_study_on_the_smoke_preset(runs_root):
    done = workbench(
        "--preset", "smoke", "--changes", "bf16,pin_memory", "--slice-s", "0.2", "--rounds", "2", "--json"
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["changes"] == ["bf16", "pin_memory"] and report["rounds"] == 2
    assert report["slice_s"] == 0.2
    base, bf16, pinned = report["study"]
    assert base["step"] == "baseline" and base["status"] == "baseline" and base["samples_per_s"] > 0
    assert bf16["adds"] == {"precision.dtype": "bf16"} and bf16["samples_per_s"] > 0
    assert bf16["rounds"] == 2 and bf16["steps"] >= 1 and base["steps"] >= 1  # a slice each round
    assert bf16["status"] == "undecided" and "too few" in bf16["note"]  # 2 rounds: no verdict
    assert pinned["status"] == "skipped" and "pin_memory needs a GPU" in pinned["reason"]
    text = study_text(report["study"])  # what the command prints without --json
    assert text.splitlines()[0].split() == [
        "step",
        "adds",
        "samples/s",
        "vs",
        "the",
        "best",
        "before",
        "verdict",
        "kept",
        "steps",
        "(this",
        "/",
        "before)",
    ]
    assert "+ pinned memory: skipped: pin_memory needs a GPU" in text
    assert "over 2 pairs" in text and "kept: nothing: the baseline; their product 1.00x the baseline" in text
    assert report["kept"] == {} and report["product"] == 1.0 and bf16["kept"] is False
    # the inference end starts from the best config's weights: here the baseline's, as nothing was kept
    inference = workbench("--inference", base["run_dir"], "--rounds", "6", "--json")
    assert inference.returncode == 0, inference.stderr
    trained, pruned, int8 = json.loads(inference.stdout)["study"]
    # the run's own saved weights, whatever accuracy its 0.5 s of steps reached on this machine
    # (0.24 on a loaded one; a step count's accuracy is not this test's question)
    saved = Subject.from_run(base["run_dir"])
    assert trained["status"] == "baseline"
    assert trained["accuracy"] == pytest.approx(saved.evaluate(saved.model), abs=1e-9)
    assert pruned["step"] == "+ structured pruning 50%" and pruned["rounds"] == 6
    assert pruned["size_mib"] < trained["size_mib"] and int8["size_mib"] < pruned["size_mib"]


def test_bad_arguments_are_refused_in_one_line_naming_the_field(runs_root):
    for args, said in [
        (
            ["--changes", "bf16,turbo"],
            "workbench stack: --changes: 'turbo' is not a change the study knows; allowed: bf16, fp16, tf32",
        ),
        (["--changes", ","], "workbench stack: --changes must name at least one of bf16"),
        (["--rounds", "0"], "workbench stack: --rounds must be >= 1, got 0"),
        (["--budget-s", "3"], "workbench stack: --budget-s was removed: a step is now --rounds pairs"),
        (["--slice-s", "0"], "workbench stack: --slice-s must be between 0.01 and 60 seconds, got 0.0"),
        (["--set", "loader.batch_size=0"], "workbench stack: loader.batch_size must be >= 1, got 0"),
        (["--inference", "runs/x", "--amount", "1.5"], "workbench stack: --amount must be between 0 and 1"),
        (
            ["--inference", "runs/x", "--changes", "bf16"],
            "workbench stack: --inference uses the run's own model",
        ),
    ]:
        smoke = [] if "--inference" in args else ["--preset", "smoke"]
        done = workbench(*smoke, *args, timeout=120)
        assert done.returncode == 2 and done.stderr.startswith(said), (args, done.stderr)
        assert done.stderr.strip().count("\n") == 0
    assert not runs_root.exists() or not any(runs_root.iterdir())
