"""The `workbench` command: runs, lists, and fails with a one-line reason."""

import json
import os
import subprocess
import sys

import pytest


def workbench(*args, env=None, timeout=180):
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_run_json_then_runs_lists_it(runs_root):
    proc = workbench("run", "--preset", "smoke", "--precision", "bf16", "--steps", "5", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "completed" and result["precision"] == "bf16"
    assert os.path.isfile(os.path.join(result["run_dir"], "summary.json"))
    listed = workbench("runs", "--json")
    assert listed.returncode == 0
    assert [r["run"] for r in json.loads(listed.stdout)] == [os.path.basename(result["run_dir"])]


def test_bad_flag_value_gives_one_line_reason_and_no_run(runs_root):
    proc = workbench("run", "--batch-size", "0")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "workbench run: loader.batch_size must be >= 1, got 0"
    assert not runs_root.exists() or not any(runs_root.iterdir())
    proc = workbench("run", "--set", "loader.num_wrkers=2")
    assert proc.returncode == 2 and "did you mean 'loader.num_workers'" in proc.stderr


def test_failed_run_exits_nonzero_with_reason(tmp_path, runs_root):
    bad = tmp_path / "m.py"
    bad.write_text("def build():\n    return 'not a module'\n")
    proc = workbench("run", "--preset", "smoke", "--model", f"{bad}:build")
    assert proc.returncode == 2  # found before launch, by building the model once in a child
    assert proc.stderr.strip().count("\n") == 0 and "must return a torch.nn.Module" in proc.stderr
    assert not runs_root.exists() or not any(runs_root.iterdir())
    late = tmp_path / "late.py"  # builds, then fails at its second training step
    late.write_text(
        "import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n"
        "        super().__init__(); self.l, self.n = torch.nn.Linear(64, 10), 0\n"
        "    def forward(self, x):\n        self.n += 1\n"
        "        if self.n > 2:\n            raise ValueError('late trouble')\n"
        "        return self.l(x.flatten(1))\ndef build():\n    return M()\n"
    )
    proc = workbench("run", "--preset", "smoke", "--model", f"{late}:build")
    assert proc.returncode == 1
    reason = proc.stderr.strip().splitlines()[-1]  # the failing rank's traceback comes above it
    assert (
        reason.startswith("workbench run: failed (raised): rank 0 raised ValueError")
        and "late trouble" in reason
    )


def test_runs_on_an_empty_store(runs_root):
    proc = workbench("runs")
    assert proc.returncode == 0 and "no runs yet" in proc.stdout


def test_run_takes_your_model_and_your_dataset_by_flag(tmp_path, runs_root):
    (tmp_path / "mydata.py").write_text(
        "import numpy as np\nimport torch\n"
        "class Points(torch.utils.data.Dataset):\n    classes = 3\n"
        "    def __len__(self):\n        return 96\n"
        "    def __getitem__(self, i):\n        return np.full(4, i % 3, dtype=np.float32), i % 3\n"
        "def build():\n    return Points()\n"
    )
    (tmp_path / "mynet.py").write_text(
        "from torch import nn\ndef build(num_classes):\n    return nn.Linear(4, num_classes)\n"
    )
    done = workbench(
        "run",
        "--preset",
        "smoke",
        "--model",
        f"{tmp_path}/mynet.py:build",
        "--data",
        "dataset",
        "--data-factory",
        f"{tmp_path}/mydata.py:build",
        "--steps",
        "3",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "completed" and result["steps"] == 3 and result["params"] == 15


def test_run_resume_extends_a_finished_run_in_a_new_folder(runs_root):
    from workbench.events import read_events

    def losses(run_dir):
        return {r["step"]: r["loss"] for r in read_events(run_dir) if r["event"] == "step"}

    quiet = ["--set", "run.eval_batches=0", "--set", "run.threads=1", "--json"]
    first = json.loads(
        workbench("run", "--preset", "smoke", "--steps", "4", "--set", "run.save_every=2", *quiet).stdout
    )
    done = workbench("run", "--resume", first["run_dir"], "--steps", "8", "--json")
    assert done.returncode == 0, done.stderr
    more = json.loads(done.stdout)
    # the finished run kept its last step's state: the new run goes on from step 4
    assert more["status"] == "completed" and more["resumed_from_step"] == 4 and more["steps"] == 8
    assert more["run_dir"] != first["run_dir"] and set(losses(more["run_dir"])) == set(range(5, 9))
    whole = json.loads(workbench("run", "--preset", "smoke", "--steps", "8", *quiet).stdout)
    expected = {k: v for k, v in losses(whole["run_dir"]).items() if k > 4}
    assert losses(more["run_dir"]) == pytest.approx(expected, abs=1e-6)
    for args, said in [
        (
            ["--resume", first["run_dir"], "--model", "cnn"],
            "--resume takes RUN_DIR's own config; drop --model",
        ),
        (["--resume", whole["run_dir"]], "holds no resumable state"),
        (["--resume", first["run_dir"]], "run.steps 4 is not past the resumable state, saved after step 4"),
    ]:
        refused = workbench("run", *args)
        assert refused.returncode != 0 and said in refused.stderr and refused.stderr.count("\n") == 1


def test_a_resume_runs_its_saved_thread_count_and_repeats_the_unbroken_runs_losses_exactly(runs_root):
    from workbench.config import RunConfig
    from workbench.distributed.launch import run
    from workbench.events import read_events
    from workbench.machine.threads import TRIAL_ENV

    def losses(run_dir):
        return {r["step"]: r["loss"] for r in read_events(run_dir) if r["event"] == "step"}

    cfg = RunConfig.smoke().replace(
        **{"run.steps": 12, "run.eval_batches": 0, "run.threads": 1, "model.width": 128}
    )
    whole = run(cfg, timeout_s=180)
    cut = run(cfg.replace(**{"run.steps": 4, "run.save_every": 4}), timeout_s=180)
    # resumed with another thread count asked and a busy launch's thread trial in its environment:
    # the saved steps' count stands and no trial runs, so every sum keeps its order
    more = run(
        cfg.replace(**{"run.resume_from": cut["run_dir"], "run.threads": 2}),
        env={TRIAL_ENV: "2,1"},
        timeout_s=180,
    )
    assert more["status"] == "completed" and more["resumed_from_step"] == 4, more
    assert more["threads"] == 1 and "thread_trial" not in more
    assert losses(more["run_dir"]) == {k: v for k, v in losses(whole["run_dir"]).items() if k > 4}
