"""Code named by a run folder runs only when the user asked: reading a folder never imports what it
names, loading one this workbench did not make here needs trust_code, and stdlib factories are
refused whatever the source. A canary factory writes a file when called; it must stay unwritten."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import torch

from workbench.cli import main as cli
from workbench.config import ConfigError, RunConfig
from workbench.events import EventWriter
from workbench.provenance import created_here
from workbench.runstore import compare, create_run_dir, list_runs, read_summary
from workbench.train.factory import load_factory
from workbench.train.restore import load_model

CANARY_MODEL = '''
from pathlib import Path
from torch import nn


def build(canary):
    Path(canary).write_text("the factory ran")
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
'''


def _model_file(tmp_path):
    path = tmp_path / "canary_model.py"
    path.write_text(CANARY_MODEL)
    return path


def _finish_folder(run_dir):
    """What a finished run leaves: events, a summary and weights (made here, not by the canary)."""
    w = EventWriter(run_dir)
    w.write("start")
    w.write("step", step=1, loss=2.0, samples_per_s=10.0)
    w.write("done")
    w.close()
    (run_dir / "summary.json").write_text(json.dumps({"status": "completed", "samples_per_s": 10.0}))
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    torch.save(model.state_dict(), run_dir / "model.pt")
    return run_dir


@pytest.fixture
def canary(tmp_path):
    return tmp_path / "canary.txt"


@pytest.fixture
def cfg(tmp_path, canary):
    return RunConfig.smoke().replace(
        **{"model.name": f"{_model_file(tmp_path)}:build", "model.kwargs": {"canary": str(canary)}}
    )


@pytest.fixture
def foreign(tmp_path, cfg, runs_root):
    """A run folder someone else made (written by hand: no record of it in this user's cache)."""
    run_dir = runs_root / "downloaded-run"
    run_dir.mkdir(parents=True)
    cfg.save(run_dir / "config.json")
    return _finish_folder(run_dir)


def test_reading_a_folder_never_runs_its_code(foreign, canary, tmp_path, capsys):
    from workbench.export import export
    from workbench.ui import attach

    assert list(list_runs()["status"]) == ["completed"]
    assert list(compare([foreign])["status"]) == ["completed"]
    assert read_summary(foreign)["status"] == "completed"
    attach(foreign, start=False)
    export(foreign, tmp_path / "exported")
    for argv in (
        ["runs"],
        ["runs", "--json"],
        ["compare", str(foreign)],
        ["export", "--run", str(foreign), "--to", str(tmp_path / "exported2")],
    ):
        assert cli(argv) == 0, argv
    capsys.readouterr()
    assert not canary.exists()


def test_loading_a_foreign_folder_shows_the_factory_and_runs_nothing(foreign, canary, capsys):
    from workbench.compress.subject import Subject
    from workbench.stacking.inference import inference_study

    for load in (
        lambda: load_model(foreign),
        lambda: Subject.from_run(foreign),
        lambda: inference_study(foreign, rounds=1),
    ):
        with pytest.raises(ConfigError) as e:
            load()
        text = str(e.value)
        assert "was not created by this workbench on this machine" in text and "\n" not in text
        assert "canary_model.py:build' called with {\"canary\"" in text and "trust_code=True" in text
    for command in ("prune", "quant"):
        assert cli([command, "--run-dir", str(foreign), "--rounds", "3"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "--trust-code" in err and "canary_model.py:build" in err
    assert not canary.exists()
    assert isinstance(load_model(foreign, trust_code=True), torch.nn.Module)  # the user said so
    assert canary.read_text() == "the factory ran"


def test_a_folder_made_here_is_trusted_but_not_a_copy_or_an_edit(cfg, canary, tmp_path):
    run_dir = _finish_folder(create_run_dir(cfg))
    assert created_here(run_dir)
    load_model(run_dir)
    assert canary.exists()
    canary.unlink()
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)  # the id travels with it, the real path does not
    edited = _finish_folder(create_run_dir(cfg))
    cfg.replace(**{"model.kwargs": {"canary": str(canary), "extra": 1}}).save(edited / "config.json")
    forged = _finish_folder(create_run_dir(cfg))  # replaced in place: its id kept, another config
    run_id = (forged / ".workbench-run").read_text()
    shutil.rmtree(forged)
    forged.mkdir()
    (forged / ".workbench-run").write_text(run_id)
    cfg.replace(**{"model.kwargs": {"canary": str(canary), "evil": True}}).save(forged / "config.json")
    _finish_folder(forged)
    for folder in (copy, edited, forged):
        assert not created_here(folder)
        with pytest.raises(ConfigError, match="trust_code=True"):
            load_model(folder)
    assert not canary.exists()


def test_trust_follows_the_code_it_ran_not_only_the_config(canary, tmp_path, monkeypatch):
    """A relative factory path resolves from where the folder is loaded: another folder's file of
    that name, or an edit to a file it imports, asks for trust again, naming the file."""
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    for folder in (here, elsewhere):
        folder.mkdir()
        (folder / "trusted_model.py").write_text("from trusted_helper import build\n")
        (folder / "trusted_helper.py").write_text(CANARY_MODEL)
    monkeypatch.chdir(here)
    cfg = RunConfig.smoke().replace(
        **{"model.name": "trusted_model.py:build", "model.kwargs": {"canary": str(canary)}}
    )
    run_dir = _finish_folder(create_run_dir(cfg))
    monkeypatch.chdir(elsewhere)
    with pytest.raises(ConfigError, match=f"resolves to '{elsewhere}/trusted_model.py' from here"):
        load_model(run_dir)
    monkeypatch.chdir(here)
    (here / "trusted_helper.py").write_text(CANARY_MODEL + "# edited\n")
    with pytest.raises(ConfigError) as refused:
        load_model(run_dir)
    assert f"'{here}/trusted_helper.py' (model.name 'trusted_model.py:build') changed since" in str(
        refused.value
    ) and "trust_code=True" in str(refused.value)
    assert not canary.exists()
    (here / "trusted_helper.py").write_text(CANARY_MODEL)  # as it was: trusted again
    assert isinstance(load_model(run_dir), torch.nn.Module) and canary.exists()


def test_built_in_models_need_no_trust(runs_root):
    run_dir = runs_root / "builtin"
    run_dir.mkdir(parents=True)
    RunConfig.smoke().save(run_dir / "config.json")
    from workbench.train.data import build_data
    from workbench.train.models import build_model

    model = build_model(RunConfig.smoke(), build_data(RunConfig.smoke()))
    torch.save(model.state_dict(), run_dir / "model.pt")
    assert isinstance(load_model(run_dir), torch.nn.Module)
    # a forged folder: weights of another shape under this config are one line, not a traceback
    torch.save({"net.0.weight": torch.zeros(3, 3)}, run_dir / "model.pt")
    with pytest.raises(
        ConfigError, match=r"does not fit the model its folder's config builds \(mlp\): "
    ) as e:
        load_model(run_dir)
    assert "\n" not in str(e.value)


REEXPORT = {
    "reexport.py": "from os import system as build\n",
    "partial.py": "import functools, os\nbuild = functools.partial(os.system, 'true')\n",
    "popen.py": "import subprocess\nbuild = subprocess.Popen\n",
}


@pytest.mark.parametrize(
    "spec",
    [
        "os:system",
        "subprocess:run",
        "builtins:exec",
        "builtins:eval",
        "shutil:rmtree",
        "importlib:import_module",
        "sys:exit",
        "posix:system",
        "pathlib:Path",
        "STDLIB_FILE",
        *REEXPORT,
    ],
)
def test_stdlib_factories_are_refused_whatever_the_source(spec, tmp_path, canary, runs_root):
    if spec == "STDLIB_FILE":
        spec = f"{subprocess.__file__}:run"  # the stdlib named by file path
    elif spec in REEXPORT:
        (tmp_path / spec).write_text(REEXPORT[spec])
        spec = f"{tmp_path / spec}:build"
    with pytest.raises(ConfigError, match="standard library") as e:
        load_factory(spec)
    assert "\n" not in str(e.value)
    from workbench.distributed.launch import start_run

    cfg = RunConfig.smoke().replace(**{"model.name": spec, "model.kwargs": {"command": f"touch {canary}"}})
    with pytest.raises(ConfigError, match="standard library"):
        start_run(cfg)
    assert not runs_root.exists() or not any(runs_root.iterdir())  # refused before anything is written
    run_dir = runs_root / "evil"
    run_dir.mkdir(parents=True)
    cfg.save(run_dir / "config.json")
    torch.save({}, run_dir / "model.pt")
    with pytest.raises(ConfigError, match="standard library"):
        load_model(run_dir, trust_code=True)  # even trusted
    assert not canary.exists()


def test_cli_refuses_a_stdlib_model_in_one_line(tmp_path, canary, capsys):
    code = cli(
        [
            "run",
            "--preset",
            "smoke",
            "--model",
            "os:system",
            "--set",
            f'model.kwargs={{"command": "touch {canary}"}}',
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "standard library" in err
    assert not canary.exists()


def test_factory_kwargs_stay_plain_json(canary):
    for bad in ({"f": os.system}, {"x": {1, 2}}, {"deep": [{"ok": 1}, object()]}, {1: "int key"}):
        with pytest.raises(ConfigError, match="model.kwargs"):
            RunConfig.smoke().replace(**{"model.kwargs": bad})
    RunConfig.smoke().replace(**{"model.kwargs": {"a": [1, 2.5, None, True, {"b": "c"}]}})
    with pytest.raises(ConfigError, match="data.kwargs"):
        RunConfig.smoke().replace(**{"data.kwargs": {"f": print}})


class _Carries:
    """What a malicious weights file holds: an object whose unpickling calls a function."""

    def __reduce__(self):
        return (os.getcwd, ())


@pytest.mark.parametrize("content", ["code", "garbage", "not_a_dict"])
def test_a_weights_file_that_is_not_plain_tensors_is_refused_in_one_line(tmp_path, capsys, content):
    run_dir = create_run_dir(RunConfig.smoke(), tmp_path)
    weights = run_dir / "model.pt"
    if content == "code":
        torch.save({"net.1.weight": _Carries()}, weights)
    elif content == "garbage":
        weights.write_bytes(b"not a torch file")
    else:
        torch.save([torch.zeros(2)], weights)
    with pytest.raises(ConfigError, match="model.pt") as caught:
        load_model(run_dir)
    assert "weights_only" not in str(caught.value) and "\n" not in str(caught.value)
    assert cli(["quant", "--run-dir", str(run_dir), "--rounds", "2"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "model.pt" in err and "weights_only" not in err
