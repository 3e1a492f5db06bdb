"""Every bad input a new user tried gets one line naming the field or path, the value and what to
do, never a traceback: the command line, run in-process (an uncaught exception fails the test)."""

from __future__ import annotations

import json
import os
import time

import pytest
import torch

from tools.bench.refusals import CASES, imports_torch, refuse
from workbench.cli import main as cli
from workbench.config import ConfigError, RunConfig
from workbench.loading.imageset import generate_image_set
from workbench.runstore import create_run_dir


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return generate_image_set(tmp_path_factory.mktemp("img") / "set", count=16, size=16, source="synthetic")


@pytest.fixture(scope="module")
def corrupt(tmp_path_factory):
    root = generate_image_set(tmp_path_factory.mktemp("bad") / "set", count=16, size=16, source="synthetic")
    (root / "class_1" / "000005.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    return root


def one_line(capsys, code, expect_code=2) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == expect_code, (code, captured.out, err)
    assert "Traceback" not in captured.err + captured.out
    assert err.count("\n") == 0 and err, err
    return err


USER_MODELS = {
    "missing.py": None,
    "syntax.py": "def build(:\n    pass\n",
    "wrong_type.py": "def build():\n    return 42\n",
    "raises.py": "def build():\n    raise RuntimeError('no GPU here')\n",
}


@pytest.mark.parametrize(
    "name, words",
    [
        ("missing.py", "does not exist"),
        ("syntax.py", "SyntaxError"),
        ("wrong_type.py", "must return a torch.nn.Module, got int"),
        ("raises.py", "no GPU here"),
    ],
)
def test_a_broken_user_model_is_one_line_before_launch(name, words, tmp_path, runs_root, capsys):
    if USER_MODELS[name] is not None:
        (tmp_path / name).write_text(USER_MODELS[name])
    t0 = time.monotonic()
    err = one_line(capsys, cli(["run", "--preset", "smoke", "--model", f"{tmp_path / name}:build"]))
    took = time.monotonic() - t0
    print(f"{name}: refused in {took:.1f} s")
    assert err.startswith("workbench run: model.name") and words in err and name in err
    assert not runs_root.exists() or not any(runs_root.iterdir())  # nothing was launched


@pytest.mark.parametrize(
    "argv, words",
    [
        (["run", "--preset", "smoke", "--run-dir", "/proc/workbench-run"], "'/proc/workbench-run"),
        (["run", "--preset", "smoke", "--run-dir", "FILE/run"], "Not a directory"),
        (["run", "--preset", "smoke", "--run-dir", ""], "run dir is empty: name a new folder"),
        (["run", "--config", "BINARY"], "is not UTF-8 text (byte 0xff at position 0): a config is a JSON"),
        (["run", "--config", "NESTED"], "its JSON is nested too deeply to read"),
        (
            ["run", "--preset", "smoke", "--set", "DEEP_SET"],
            "--set model.kwargs: its value is nested too deeply",
        ),
        (
            ["run", "--preset", "smoke", "--set", "DEEPISH_SET"],
            "model.kwargs must be nested at most 32 levels",
        ),
        (["run", "--preset", "smoke", "--set", "run.label=" + "y" * 3000], "yyy... (3,002 characters)"),
        (["run", "--preset", "smoke", "--batch-size", "9" * 3000], "999... (3,000 characters); use a"),
        (["run", "--preset", "smoke", "--run-dir", "FILE"], "a_file' is a file; choose a new folder"),
        (
            ["run", "--preset", "smoke", "--run-dir", "FULL"],
            "is not empty (it holds 'notes.txt'): a run needs",
        ),
        (["export", "--config", "CONFIG", "--to", "/proc/workbench-export"], "/proc/workbench-export"),
        (["export", "--config", "CONFIG", "--to", "FILE/export"], "Not a directory"),
        (["loader", "make-images", "/proc/workbench-images", "--count", "2"], "/proc/workbench-images"),
        (["loader", "make-images", "FILE/images", "--count", "2"], "Not a directory"),
        (["runs", "--dir", "FILE"], "is a file, not a folder of runs"),
        (["loader", "sweep", "IMAGES", "--rounds", "0"], "--rounds must be >= 1, got 0"),
        (["loader", "sweep", "IMAGES", "--nproc", "0"], "--nproc must be >= 1, got 0"),
        (["loader", "sweep", "CORRUPT", "--workers", "0", "--rounds", "1"], "000005.png"),
        (["loader", "sweep", "CORRUPT", "--workers", "1", "--rounds", "1"], "000005.png"),
        (["prune", "--eval", "missing.py:score", "--rounds", "3"], "--eval 'missing.py:score'"),
        (["run", "--preset", "smoke", "--set", "loader.num_workers=1000"], "loader.num_workers=1000"),
        (["run", "--preset", "smoke", "--nproc", "64"], "distributed.nproc=64"),
        (["run", "--preset", "smoke", "--batch-size", "1000000000000"], "loader.batch_size must be <= 1402"),
        (["run", "--preset", "smoke", "--set", "model.width=1000000000"], "GiB of RAM"),
        (["run", "--preset", "smoke", "--model", "os:system"], "standard library"),
        (["serve", "--workers", "0"], "--workers must be 1-16, got 0"),
        (["serve", "--replicas", "0"], "--replicas must be 1-16, got 0"),
        (["serve", "/no/such/run", "--workers", "2"], "RUN '/no/such/run' does not exist"),
        (["serve", "--replicas", "2", "--workers", "2"], "--replicas 2 with --workers 2: give one"),
        (
            ["serve", "--variant", "int8", "--amount", "0.3"],
            "--amount is for --variant pruned, got --variant int8",
        ),
        (["serve", "--variant", "pruned", "--amount", "1.5"], "--amount must be between 0 and 1"),
    ],
    ids=lambda v: " ".join(v)[:80] if isinstance(v, list) else None,
)
def test_bad_paths_and_values_are_one_line(argv, words, tmp_path, images, corrupt, capsys):
    afile = tmp_path / "a_file"
    afile.write_text("not a folder")
    config = tmp_path / "config.json"
    RunConfig.smoke().save(config)
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00binary")
    (tmp_path / "nested.json").write_text("[" * 100_000 + "]" * 100_000)
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("the user's")
    subs = {
        "FILE": str(afile),
        "FULL": str(full),
        "BINARY": str(tmp_path / "binary.json"),
        "NESTED": str(tmp_path / "nested.json"),
        "CONFIG": str(config),
        "IMAGES": str(images),
        "CORRUPT": str(corrupt),
        "DEEP_SET": "model.kwargs=" + '{"a":' * 10_000 + "1" + "}" * 10_000,
        "DEEPISH_SET": "model.kwargs=" + '{"a":' * 900 + "1" + "}" * 900,
    }
    argv = [subs.get(a, a.replace("FILE/", f"{afile}/")) for a in argv]
    err = one_line(capsys, cli(argv))
    assert words in err, err


def test_a_run_folder_named_with_a_leading_dash_runs_there(tmp_path, monkeypatch, capsys):
    """'-dash' is a folder name, not an option: the supervisor and the rank get it absolute."""
    monkeypatch.chdir(tmp_path)
    assert cli(["run", "--preset", "smoke", "--steps", "3", "--run-dir=-dash"]) == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "-dash" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 3
    assert not (tmp_path / "config.json").exists()  # the run is in -dash, not here


def test_quant_on_cuda_without_a_gpu_is_one_line(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    err = one_line(capsys, cli(["quant", "--device", "cuda", "--rounds", "3"]))
    assert "--device must be cpu on this machine, got 'cuda'" in err


def test_broken_json_breaks_neither_runs_nor_compare(runs_root, capsys):
    good = create_run_dir(RunConfig.smoke())
    bad_config = create_run_dir(RunConfig.smoke().replace(**{"run.label": "bad-config"}))
    (bad_config / "config.json").write_text("{ not json")
    bad_summary = create_run_dir(RunConfig.smoke().replace(**{"run.label": "bad-summary"}))
    (bad_summary / "summary.json").write_text('{"status": "compl')
    assert cli(["runs"]) == 0
    captured = capsys.readouterr()
    assert good.name in captured.out and bad_config.name not in captured.out
    skipped = captured.err.strip().splitlines()
    assert len(skipped) == 2 and all("skipped" in ln and "not valid JSON" in ln for ln in skipped)
    err = one_line(capsys, cli(["compare", str(good), str(bad_summary)]))
    assert "summary.json" in err and "not valid JSON" in err


def test_start_run_given_a_dict_says_what_to_pass():
    from workbench.distributed.launch import start_run

    with pytest.raises(ConfigError, match=r"must be a RunConfig \(RunConfig.from_dict\(d\) builds one"):
        start_run(RunConfig.smoke().to_dict())


def test_exporting_a_run_that_did_not_complete_warns(runs_root, tmp_path, capsys):
    run_dir = create_run_dir(RunConfig.smoke())
    (run_dir / "rank0.jsonl").write_text(json.dumps({"event": "step", "step": 3, "rank": 0}) + "\n")
    assert cli(["export", "--run", str(run_dir), "--to", str(tmp_path / "out")]) == 0
    assert "warning: run" in capsys.readouterr().out


def test_hw_bench_saves_its_figures_when_the_cache_cannot_be_written(tmp_path, monkeypatch, capsys):
    from workbench.hardware import microbench

    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    monkeypatch.setenv("WORKBENCH_CACHE", str(blocker / "cache"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        microbench, "plan", lambda d, q, r: [("copy", lambda: microbench.copy_bandwidth(d, mib=8, repeats=3))]
    )
    assert cli(["hw", "--bench", "--quick", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert "Not a directory" in out["cache_error"] and out["ceilings"][0]["value"] > 0
    saved = json.loads(open(out["saved_to"]).read())
    assert saved["bandwidth_gbs"]["copy"] > 0 and saved["conditions"]["device"].startswith("cpu")
    assert captured.err.strip().splitlines()[-1].startswith("workbench hw: writing the ceiling cache")


@pytest.mark.parametrize("name", list(CASES))
def test_the_command_line_refuses_before_importing_torch(name, tmp_path):
    """The measured cases of `python -m tools.bench refusals`: one line, exit code 2, and torch
    never imported (that import is what made refusals take 8-28 s on a busy machine)."""
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00binary")
    env = {**os.environ, "WORKBENCH_RUNS": str(tmp_path / "runs"), "WORKBENCH_CACHE": str(tmp_path / "cache")}
    _, done = refuse(CASES[name], tmp_path, env)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not imports_torch(CASES[name], tmp_path, env)


@pytest.mark.slow
def test_a_refusal_inside_a_rank_is_one_line_and_its_traceback_stays_in_the_folder(
    tmp_path, runs_root, capsys
):
    from launch_helpers import faulty_model
    from workbench.runfolder import RunFolder

    model = faulty_model(tmp_path)
    code = cli(
        [
            "run",
            "--preset",
            "smoke",
            "--model",
            model,
            "--nproc",
            "2",
            "--steps",
            "6",
            "--set",
            'model.kwargs={"mode": "refuse", "rank": 1, "step": 3}',
            "--run-dir",
            str(tmp_path / "run"),
        ]
    )
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err, err
    assert "the shard for rank 1 is refused" in err, err
    summary = RunFolder(tmp_path / "run").summary()
    assert (summary["cause"], summary["error_type"], summary["failed_rank"]) == ("raised", "ConfigError", 1)
    assert "ConfigError" in RunFolder(tmp_path / "run").traceback_file(1).read_text()
