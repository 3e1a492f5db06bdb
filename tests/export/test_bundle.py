"""An export's folder: its files and commands, a user's model file carried along, bad input
refused, and what a resumed run's export leaves out."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from exported_script import import_script, undefined_names
from workbench.config import ConfigError, RunConfig
from workbench.export import export


def test_files_and_commands(tmp_path):
    cfg = RunConfig.smoke().replace(**{"distributed.nproc": 2, "run.label": "demo"})
    result = export(cfg, tmp_path / "out", nodes=3, port=29612)
    names = {p.name for p in result.files}
    assert {"config.json", "train.py", "commands.md", "run.sh", "job.slurm", "data.pt"} <= names
    assert RunConfig.load(tmp_path / "out" / "config.json") == cfg
    md = (tmp_path / "out" / "commands.md").read_text()
    assert (
        "torchrun --nnodes=1 --nproc-per-node=2 --rdzv-backend=c10d "
        "--rdzv-endpoint=127.0.0.1:29612 --local-addr 127.0.0.1 train.py"
    ) in md
    assert "--nnodes=3 --nproc-per-node=2" in md and "--rdzv-endpoint=HEAD_NODE:29612" in md
    # what the script does with threads and the allocator, from the rules it runs (not OMP_NUM_THREADS)
    assert "OMP_NUM_THREADS is not read" in md and "uses every core" not in md
    assert "WORKBENCH_THREADS=N python train.py" in md and "run.allocator ('auto')" in md
    job = (tmp_path / "out" / "job.slurm").read_text()
    assert "#SBATCH --nodes=3" in job and "#SBATCH --ntasks-per-node=1" in job
    assert 'srun --kill-on-bad-exit=1 bash -c \'on_node "$@"\' on_node "$@"' in job
    assert 'exec torchrun --nnodes="$SLURM_NNODES" --nproc-per-node=2' in job
    assert '--rdzv-endpoint="$head_addr:29612"' in job and 'train.py "$@"' in job
    for name in ("job.slurm", "run.sh"):
        subprocess.run(["bash", "-n", str(tmp_path / "out" / name)], check=True)
    tree = ast.parse((tmp_path / "out" / "train.py").read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported - set(sys.stdlib_module_names) == {"torch"}


def test_user_model_file_travels_with_the_script(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text(
        "import torch\ndef build(hidden=8):\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, hidden),"
        " torch.nn.ReLU(), torch.nn.Linear(hidden, 10))\n"
    )
    monkeypatch.chdir(tmp_path)
    cfg = RunConfig.smoke().replace(**{"model.name": "mine.py:build", "model.kwargs": {"hidden": 12}})
    export(cfg, tmp_path / "out")
    assert (tmp_path / "out" / "mine.py").is_file()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # no mine.py here: the script finds its own copy
    script = import_script(tmp_path / "out" / "train.py")
    s = script.settings(script.CONFIG)
    model = script.build_model(s, script.build_data(s))
    assert model[1].out_features == 12
    assert undefined_names((tmp_path / "out" / "train.py").read_text(), "train.py") == []


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        export(tmp_path / "nope", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="has no config.json"):
        export(tmp_path / "empty", tmp_path / "out")
    with pytest.raises(ConfigError, match="nodes must be >= 2"):
        export(RunConfig.smoke(), tmp_path / "out", nodes=1)
    export(RunConfig.smoke(), tmp_path / "out")
    with pytest.raises(ConfigError, match="already holds an export"):
        export(RunConfig.smoke(), tmp_path / "out")
    export(RunConfig.smoke(), tmp_path / "out", overwrite=True)
    cfg = RunConfig.smoke().replace(**{"model.name": "gone.py:build"})
    with pytest.raises(ConfigError, match="gone.py"):
        export(cfg, tmp_path / "out2")


def test_an_export_of_a_resumed_run_trains_from_step_0_without_the_folder_it_resumed(tmp_path):
    result = export(
        RunConfig.smoke().replace(**{"run.resume_from": str(tmp_path / "gone")}), tmp_path / "out"
    )
    assert RunConfig.load(result.dir / "config.json").run.resume_from == ""
