"""Sweeps, the variants table, verdicts, a user's own model and a run folder's weights, the CLI,
and the published check (pruning with a short fine-tune keeps accuracy near dense)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from workbench.cli import main as cli_main
from workbench.config import ConfigError, RunConfig
from workbench.compress.subject import Subject
from workbench.compress.prune_sweep import SweepConfig, finetune, run_sweep
from workbench.compress.reasons import judge as verdict
from workbench.measure.ratios import paired_ratio

DIGITS_MLP = RunConfig.smoke().replace(**{"model.width": 256, "model.depth": 2})
FAST = dict(batch_sizes=(1, 32), rounds=6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(amounts=[0.5, 1.2]), r"sweep.amounts entries must be fractions in \[0, 1\], got 1.2"),
        (dict(amounts=[float("nan")]), "sweep.amounts entries"),
        (dict(amounts=[True]), "sweep.amounts entries"),
        (dict(amounts=[]), "sweep.amounts must be a non-empty list"),
        (dict(method="l0"), "sweep.method must be one of magnitude, random, structured"),
        (dict(finetune_epochs=-1), "sweep.finetune_epochs must be an integer >= 0"),
        (dict(batch_sizes=(0,)), "sweep.batch_sizes must be integers >= 1"),
    ],
)
def test_sweep_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        SweepConfig(**kwargs)


def test_a_batch_timed_beside_other_programs_keeps_its_verdict_and_says_its_conditions():
    """Busy pairs are kept: both sides of a pair met the same load. An A/A beside two busy
    processes comes out within noise, and the record says under which load it was timed."""
    from workbench.compress import stats
    from workbench.procs import OtherWork

    torch.manual_seed(0)
    models = {"dense": torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))}
    models["same"] = models["dense"]  # an A/A: any verdict but "within noise" would be noise
    subject = Subject.from_config(DIGITS_MLP)
    with OtherWork(2) as hogs:
        busy = stats.latencies(models, subject, batch_sizes=(1, 32), rounds=8)["same"]
        assert hogs.alive()
    for b in (1, 32):
        assert busy[f"speedup_b{b}_verdict"] == "within noise", busy
        assert busy[f"speedup_b{b}_low"] is not None
        assert busy[f"speedup_b{b}_rounds"] + busy[f"dropped_b{b}"] == 8
        assert busy[f"busy_b{b}"] and "beside other programs" in busy[f"conditions_b{b}"]
    judged = verdict("structured", busy)
    assert judged["verdict"] == "within noise" and "beside other programs" not in judged["why"]
    # the load is said once for a table, above its rows, not in every row's reason
    assert stats.conditions_line([busy]).startswith("timed beside other programs holding")


def timed(**ratios) -> dict:
    """A latencies record from synthetic paired rounds: batch -> (speedup, spread per round)."""
    rec = {}
    for key, (ratio, spread) in ratios.items():
        dense = [10.0 + 0.1 * i for i in range(15)]
        variant = [d / ratio * (1 + spread * ((-1) ** i) * (i % 5) / 4) for i, d in enumerate(dense)]
        rec.update(paired_ratio(dense, variant).as_dict(f"speedup_{key}"))
    return rec


def test_verdicts_follow_the_interval_not_the_median():
    assert verdict("unstructured", timed(b1=(1.0, 0.02), b64=(1.01, 0.02)), 0.7)["verdict"] == "within noise"
    v = verdict("masked", timed(b1=(0.5, 0.02), b64=(0.6, 0.02)))
    assert v["verdict"] == "slower" and "hook" in v["why"]
    v = verdict("structured", timed(b1=(1.3, 0.02), b64=(2.5, 0.02)))
    assert v["verdict"] == "faster" and "2.50x [" in v["why"] and "over 15 pairs" in v["why"]
    # a median of 1.4x whose rounds swing from 0.7x to 2.8x is not a speedup
    assert verdict("structured", timed(b64=(1.4, 0.8)))["verdict"] == "within noise"
    v = verdict("dynamic_int8", timed(b1=(0.5, 0.02), b64=(1.5, 0.02)))
    assert "memory-bound" in v["why"] and "slower at batch 1" in v["why"]
    assert (
        "at 50% sparsity the CSR kernel's index overhead outweighed the zeros it skipped"
        in verdict("sparse_csr", timed(b64=(0.8, 0.02)), 0.5)["why"]
    )


def test_a_result_touching_under_half_the_weights_says_so():
    cov = {
        "coverage": 0.015,
        "partial": True,
        "layers_touched": ["lm_head"],
        "layers_left": [],
        "touched_weights": 1664,
        "model_weights": 109952,
    }
    v = verdict("unstructured", timed(b64=(1.0, 0.02)), 0.9, cov)
    assert v["verdict"] == "within noise, partial: 1.5% of the weights"
    assert "partial: pruned 1 layer holding 1.5% of the model's weights (1,664 of 109,952)" in v["why"]


def test_magnitude_sweep_records(tmp_path):
    subject = Subject.from_config(RunConfig.smoke())
    df = run_sweep(subject, SweepConfig(amounts=[0.0, 0.5, 0.9], finetune_epochs=1, **FAST))
    assert list(df["amount"]) == [0.0, 0.5, 0.9]
    assert df["sparsity"].tolist() == pytest.approx([0.0, 0.5, 0.9], abs=0.01)
    assert df["verdict"].iloc[0] == "reference" and "noise floor" in df["why"].iloc[0]
    assert ", 6 pairs at batch" in df["why"].iloc[0]  # the floor is itself an interval
    floor = df["why"].iloc[0].split("not a speedup: ", 1)[1]
    for word in ("faster", "slower", "within noise"):  # an A/A's ratio is no verdict
        assert word not in floor
    assert df["speedup_b32_verdict"].iloc[0] == "reference"
    assert df["coverage"].iloc[1] > 0.95 and df["timing_threads"].iloc[1] == 1
    assert df["model_sparsity"].iloc[1] == pytest.approx(0.5 * df["coverage"].iloc[1], abs=0.01)
    assert {"speedup_b32_low", "speedup_b32_high", "speedup_b32_rounds"} <= set(df.columns)
    for col in [
        "accuracy",
        "accuracy_finetuned",
        "latency_b1_ms",
        "latency_b32_p90_ms",
        "speedup_b32",
        "nonzero_weights",
        "size_bytes",
        "verdict",
        "why",
    ]:
        assert df[col].notna().all(), col
    # zeros are still stored: the file stays the dense size (give or take pickle framing)
    assert ((df["size_bytes"] - df["dense_size_bytes"]).abs() < 0.01 * df["dense_size_bytes"]).all()


def test_structured_sweep_on_a_users_model_with_its_own_score(tmp_path):
    (tmp_path / "mine.py").write_text(
        "import torch\nfrom torch import nn\n"
        "def build():\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 10))\n"
        "def score(model):\n    return float(model(torch.ones(2, 1, 8, 8)).shape[0])\n"
    )
    cfg = RunConfig.smoke().replace(**{"model.name": f"{tmp_path}/mine.py:build"})
    subject = Subject.from_config(cfg, eval_fn=f"{tmp_path}/mine.py:score")
    df = run_sweep(subject, SweepConfig(amounts=[0.0, 0.5], method="structured", **FAST))
    assert df["accuracy"].tolist() == [2.0, 2.0]  # the user's function decided the score
    assert df["params"].iloc[1] < df["params"].iloc[0]
    assert df["params_removed"].iloc[1] > 0.4


@pytest.mark.slow
def test_sweep_on_the_weights_saved_in_a_run_folder():
    from workbench.distributed.launch import run

    result = run(RunConfig.smoke().replace(**{"run.steps": 40}), timeout_s=120)
    assert result["status"] == "completed", result
    subject = Subject.from_run(result["run_dir"])
    df = run_sweep(subject, SweepConfig(amounts=[0.0], **FAST))
    # trained weights, not a fresh model (chance is 10 %); the run scored only 2 eval batches
    assert df["accuracy"].iloc[0] > 0.5


def test_published_check_pruning_with_fine_tune_keeps_accuracy():
    """Han et al. 2015: pruning plus retraining keeps accuracy near dense. Digits MLP
    64-256-256-10; on this machine dense 97.5 %, 70 % sparsity after a 5-epoch fine-tune 97.5 %."""
    torch.manual_seed(0)
    subject = Subject.from_config(DIGITS_MLP)
    finetune(subject.model, subject, epochs=8, lr=2e-3)
    dense = subject.evaluate(subject.model)
    df = run_sweep(subject, SweepConfig(amounts=[0.7], finetune_epochs=3, **FAST))
    pruned = df["accuracy_finetuned"].iloc[0]
    print(
        f"digits MLP: dense {dense:.1%}, 70% sparsity {df['accuracy'].iloc[0]:.1%} before and "
        f"{pruned:.1%} after a 3-epoch fine-tune (published: about equal to dense)"
    )
    assert dense > 0.93
    assert pruned >= dense - 0.03


def test_cli_prune_and_quant_json(capsys):
    assert (
        cli_main(
            [
                "prune",
                "--json",
                "--width",
                "32",
                "--amounts",
                "0,0.5",
                "--rounds",
                "3",
                "--batch-sizes",
                "1,16",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert [r["amount"] for r in out["records"]] == [0.0, 0.5] and out["records"][1]["verdict"]
    assert (
        cli_main(
            [
                "quant",
                "--json",
                "--width",
                "32",
                "--method",
                "dynamic_int8",
                "--rounds",
                "3",
                "--batch-sizes",
                "1,16",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    r = out["results"][0]
    assert r["converted"] == 3 and r["backend"] == "torch.ao" and r["size_ratio"] < 1


def test_cli_prunes_your_model_on_your_dataset_and_says_when_accuracy_means_nothing(capsys):
    examples = Path(__file__).resolve().parents[2] / "examples"
    assert (
        cli_main(
            [
                "prune",
                "--json",
                "--model",
                f"{examples}/resnet.py:build",
                "--data",
                "dataset",
                "--data-factory",
                f"{examples}/strokes.py:build",
                "--set",
                'model.kwargs={"width": 4}',
                "--set",
                'data.kwargs={"size": 200}',
                "--amounts",
                "0,0.5",
                "--rounds",
                "6",
                "--batch-sizes",
                "1,8",
                "--train-epochs",
                "1",
                "--method",
                "structured",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    r = out["records"][1]
    assert out["trained"] and r["coverage"] == 1.0
    from workbench.compress.subject import CHANCE_FACTOR

    near_chance = out["records"][0]["accuracy"] <= CHANCE_FACTOR / 4  # 4 classes; amount 0: dense
    assert (out["accuracy_note"] is not None) == near_chance, out["accuracy_note"]
    assert r["details"]["layers_touched"] and r["speedup_b8_rounds"] == 6
    assert (
        cli_main(
            [
                "quant",
                "--json",
                "--width",
                "32",
                "--method",
                "dynamic_int8",
                "--rounds",
                "6",
                "--batch-sizes",
                "1,8",
                "--train-epochs",
                "0",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["accuracy_note"] and not out["trained"]  # untrained: near chance or not, it is said
    assert out["results"][0]["coverage"] > 0.95 and out["results"][0]["speedup_b8_low"] is not None


@pytest.mark.parametrize(
    "argv, message",
    [
        (["prune", "--amounts", "0,2"], "sweep.amounts entries must be fractions"),
        (["prune", "--amounts", "a,b"], "--amounts must be comma-separated float"),
        (
            ["prune", "--model", "mine.py:build"],
            "is your own model, which does not say what data it takes: add --data (digits",
        ),
        (["prune", "--data", "dataset"], "--data dataset needs --data-factory FILE:build"),
        (["quant", "--method", "semi_structured_2_4"], "this is a CPU"),
        (["quant", "--method", "fp4"], "--method must be one of"),
    ],
)
def test_cli_bad_input_exits_2_with_the_reason(argv, message, capsys):
    assert cli_main(argv + ["--rounds", "3", "--width", "32"]) == 2
    assert message in capsys.readouterr().err


def test_what_notebook_03_says_of_a_kind_comes_from_its_table():
    import pandas as pd

    from workbench.compress.reasons import measured_sentence

    df = pd.DataFrame(
        [
            {"variant": "dense", "kind": "dense", "speedup_b64": 1.0},
            {
                "variant": "sparse CSR 90%",
                "kind": "sparse_csr",
                "speedup_b64": 1.4,
                "speedup_b64_low": 1.2,
                "speedup_b64_high": 1.6,
                "speedup_b64_rounds": 15,
                "speedup_b64_verdict": "faster",
            },
        ]
    )
    assert (
        measured_sentence(df, "sparse_csr", 64)
        == "sparse CSR 90%: 1.40x [1.20, 1.60] over 15 pairs: faster at batch 64"
    )
    assert measured_sentence(df, "masked", 64) == ""


def test_an_a_a_that_reads_faster_marks_the_whole_sweep_unreliable(monkeypatch):
    """The 0 % row times the dense model against itself; when that reads faster (here forced), the
    timing method is not honest on this machine now, and every row says so."""

    def timed(models, subject, batch_sizes, rounds):
        rec = {}
        for b in batch_sizes:
            rec.update(
                {
                    f"latency_b{b}_ms": 1.0,
                    f"speedup_b{b}": 1.3,
                    f"speedup_b{b}_low": 1.2,
                    f"speedup_b{b}_high": 1.4,
                    f"speedup_b{b}_rounds": 6,
                    f"speedup_b{b}_verdict": "faster",
                }
            )
        return {"dense": {f"latency_b{b}_ms": 1.3 for b in batch_sizes}, "pruned": rec}

    monkeypatch.setattr("workbench.compress.prune_sweep.latencies", timed)
    subject = Subject.from_config(RunConfig.smoke())
    df = run_sweep(subject, SweepConfig(amounts=[0.0, 0.5], finetune_epochs=0, **FAST))
    assert df["verdict"].iloc[0] == "reference" and df["speedup_b32_verdict"].iloc[0] == "reference"
    for why, unreliable in zip(df["why"], df["unreliable"]):
        assert unreliable.startswith("the dense model timed against itself read faster at batch")
        assert why.startswith(unreliable)


def test_a_model_that_has_not_learned_is_flagged_before_its_sweep():
    fresh = Subject.from_config(RunConfig.smoke())  # nobody trained it: about 1 in 10 right
    flag = fresh.not_learned()
    assert flag.startswith("this model has not learned: accuracy 0.") and "with 10 classes" in flag
    df = run_sweep(fresh, SweepConfig(amounts=[0.0, 0.5], finetune_epochs=0, **FAST))
    assert list(df["not_learned"]) == [flag, flag]
    trained = Subject.from_config(RunConfig.smoke())
    finetune(trained.model, trained, 5)
    assert trained.evaluate(trained.model) > 0.5 and trained.not_learned() == ""


def interrupted_at(argv: list[str], line_start: str, tmp_path) -> tuple[int, str, str]:
    """`workbench ARGV` in a process of its own, sent SIGINT once its stderr prints a line starting
    with `line_start`: (exit code, stdout, stderr)."""
    import os
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "WORKBENCH_RUNS": str(tmp_path / "runs")},
    )
    try:
        for line in proc.stderr:
            if line.startswith(line_start):
                proc.send_signal(signal.SIGINT)
                break
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    return proc.returncode, out, err


def test_ctrl_c_in_a_sweep_prints_the_points_measured_and_exits_130(tmp_path):
    argv = [
        "prune",
        "--width",
        "32",
        "--amounts",
        "0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9",
        "--rounds",
        "6",
        "--batch-sizes",
        "1,8",
        "--train-epochs",
        "0",
    ]
    code, out, err = interrupted_at(argv, "  point 1 of 10", tmp_path)  # the first point is measured
    assert code == 130, err
    assert "workbench prune: interrupted (SIGINT)" in err and "Traceback" not in err
    table = [ln for ln in out.splitlines() if ln.strip()[:4] in ("0.00", "0.10", "0.20")]
    assert table and len(table) < 10, out  # the points measured before it, not all ten


def test_ctrl_c_in_quant_prints_the_rows_measured_and_exits_130(tmp_path):
    import re

    rounds = 400  # far more than it gets through before Ctrl-C
    argv = [
        "quant",
        "--width",
        "32",
        "--method",
        "dynamic_int8",
        "--rounds",
        str(rounds),
        "--batch-sizes",
        "1,8",
        "--train-epochs",
        "0",
    ]
    # once the timing has begun (an untrained model's note may not come)
    code, out, err = interrupted_at(argv, "  timing float, dynamic_int8 side by side", tmp_path)
    assert code == 130, err
    assert "workbench quant: interrupted (SIGINT)" in err and "Traceback" not in err
    assert "float: accuracy" in out, out
    pairs = [int(n) for n in re.findall(r"over (\d+) pairs", out)]
    assert all(n < rounds for n in pairs), out  # the rounds measured before it, not all of them
