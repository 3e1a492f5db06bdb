"""The exported script run outside the workbench, compared loss for loss with the workbench's own
run of the same config and seed: one process, two ranks under torchrun, FSDP, a two-node SLURM
job on loopback, saved state shared both ways and a restart; its threads chosen by the
workbench's rule beside other work; a GPU it cannot see refused in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from exported_script import run_blocked, script_losses, workbench_losses
from workbench.config import RunConfig
from workbench.export import export
from workbench.export.launch_commands import single_node
from workbench.export.verify import reproduce
from workbench.distributed.launch import run
from workbench.net import free_port


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is of a GPU this machine lacks")
def test_a_script_asked_for_a_gpu_it_cannot_see_says_so_in_one_line(tmp_path):
    # The script picks its device with the workbench's own rule, copied, and says it as the
    # workbench does (a config carried from a GPU machine to a CPU one).
    export(RunConfig.smoke().replace(**{"run.device": "cuda"}), tmp_path / "out")
    proc = subprocess.run(
        [sys.executable, "train.py", "--out", ""],
        cwd=tmp_path / "out",
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.startswith("train.py: run.device must be 'cpu' or 'auto' on this machine")
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_script_one_rank_reproduces_the_run(tmp_path):
    cfg = RunConfig.smoke().replace(
        **{
            "run.steps": 6,
            "precision.dtype": "bf16",
            "optim.grad_accum_steps": 2,
            "optim.name": "sgd",
            "optim.lr": 0.05,
            "run.eval_batches": 1,
        }
    )
    summary = run(cfg, tmp_path / "run", timeout_s=180)
    assert summary["status"] == "completed", summary
    export(summary["run_dir"], tmp_path / "out")
    proc = run_blocked(tmp_path / "out", "--metrics", "metrics")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "eval: loss" in proc.stdout and (tmp_path / "out" / "out" / "model.pt").is_file()
    ours = workbench_losses(summary["run_dir"])
    assert len(ours) == 6
    assert script_losses(tmp_path / "out" / "metrics") == pytest.approx(ours, abs=1e-4)
    # the run's own thread choice travels as the script's fallback where /proc cannot be read
    assert "RECORDED = {'other_cpu_cores'" in (tmp_path / "out" / "train.py").read_text()
    assert proc.stdout.startswith("threads: other processes held")
    # and it starts with the allocator the run's ranks had, by the same rule (run.allocator)
    assert f"memory allocator: {summary['allocator']} (run.allocator 'auto')" in proc.stdout


MINE = """from torch import nn


class Net(nn.Module):  # a model of one's own, as a user writes it
    def __init__(self, in_channels, num_classes):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, 64), nn.ReLU(),
                                  nn.Linear(64, num_classes))

    def forward(self, x):
        return self.body(x)


def build(in_channels, num_classes):
    return Net(in_channels, num_classes)
"""


def test_the_script_chooses_its_threads_by_the_workbenchs_rule_beside_other_work(tmp_path):
    from workbench.machine.cpu import usable_cores
    from workbench.procs import OtherWork

    (tmp_path / "mine.py").write_text(MINE)
    export(
        RunConfig.smoke().replace(
            **{"run.steps": 60, "run.eval_batches": 0, "model.name": f"{tmp_path / 'mine.py'}:build"}
        ),
        tmp_path / "out",
    )
    with OtherWork(2):  # no workbench import: a copy of the rule
        proc = run_blocked(tmp_path / "out", "--out", "")
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in proc.stdout.splitlines() if line.startswith("threads: ")]
    assert said and said[0].startswith("threads: other processes held"), proc.stdout
    if usable_cores() > 1:  # as a workbench run: passive, and the warm-up keeps the faster count
        assert "passive" in said[0].lower() and "the warm-up tried 2 and 1 thread(s)" in said[1], said


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    """The workbench's own 2-rank run (torchrun, gloo), shared by the torchrun and SLURM tests."""
    cfg = RunConfig.smoke().replace(**{"run.steps": 5, "distributed.nproc": 2, "run.eval_batches": 0})
    summary = run(cfg, tmp_path_factory.mktemp("ddp") / "run", timeout_s=240)
    assert summary["status"] == "completed", summary
    return summary["run_dir"]


@pytest.mark.slow
def test_torchrun_two_ranks_reproduces_the_run(tmp_path, two_rank_run):
    from workbench.export.verify import script_command

    result = export(two_rank_run, tmp_path / "out")
    cfg = RunConfig.load(result.dir / "config.json")
    assert script_command(cfg, 1234)[3:-1] == single_node(cfg, port=1234)[1:-1]  # the documented command
    table = reproduce(result.dir, two_rank_run, timeout_s=240)  # torchrun, 2 ranks on 127.0.0.1
    assert len(table) == 5 and table["abs_diff"].max() < 1e-4
    for rank in (0, 1):
        assert script_losses(result.dir / "reproduce_metrics", rank) == pytest.approx(
            workbench_losses(two_rank_run, rank), abs=1e-4
        )


@pytest.mark.slow
def test_an_fsdp_run_exports_a_script_that_shards_and_reproduces_it(tmp_path):
    """distributed.strategy 'fsdp' travels: the script shards as the run did (FSDP2 per block, then
    the root), its losses are the run's on both ranks, and the saved weights are whole."""
    cfg = RunConfig.smoke().replace(
        **{"run.steps": 5, "distributed.nproc": 2, "run.eval_batches": 0, "distributed.strategy": "fsdp"}
    )
    summary = run(cfg, tmp_path / "run", timeout_s=240)
    assert summary["status"] == "completed", summary
    result = export(summary["run_dir"], tmp_path / "out")
    assert "def apply_fsdp(" in (result.dir / "train.py").read_text()
    table = reproduce(result.dir, summary["run_dir"], timeout_s=240)
    assert len(table) == 5 and table["abs_diff"].max() < 1e-4
    for rank in (0, 1):
        assert script_losses(result.dir / "reproduce_metrics", rank) == pytest.approx(
            workbench_losses(summary["run_dir"], rank), abs=1e-4
        )


def _slurm_job(job_dir: Path, env: dict, timeout: float, args: list[str]):
    """Run job.slurm in its own session; on a timeout kill the whole tree and return None."""
    proc = subprocess.Popen(
        ["bash", "job.slurm", *args],
        cwd=job_dir,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None
    return proc.returncode, out, err


def _keep_output(name: str, outcome) -> None:
    """A failed try's exit code, stdout and stderr, whole, under test-output/ for the next reader."""
    folder = Path(__file__).resolve().parents[2] / "test-output"
    folder.mkdir(exist_ok=True)
    returncode, out, err = outcome if outcome is not None else ("hung", "", "")
    (folder / name).write_text(f"exit code: {returncode}\n--- stdout\n{out}\n--- stderr\n{err}\n")


@pytest.mark.slow
def test_slurm_job_runs_two_nodes_on_loopback(tmp_path, two_rank_run):
    """job.slurm under stand-ins for srun and scontrol: two 'nodes' of one rank on 127.0.0.1."""
    cfg = RunConfig.load(Path(two_rank_run) / "config.json").replace(**{"distributed.nproc": 1})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/bash\nprintf '127.0.0.1\\n127.0.0.1\\n'\n")
    (bin_dir / "srun").write_text(  # one copy of the command per node, as srun would start
        "#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\npids=()\n"
        "for i in $(seq 1 $SLURM_NNODES); do \"$@\" & pids+=($!); done\n"
        "rc=0; for p in ${pids[@]}; do wait $p || rc=$?; done; exit $rc\n"
    )
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    # Two torchrun agents on one machine both try to host the rendezvous (on a cluster only the
    # first node can); about 1 in 20 such pairs never completes it here, and about 1 in 40 ends
    # with exit code 1 after every step ran, the second agent failing to reach the first one's
    # rendezvous store as it shuts down. One retry on a fresh port keeps that simulation artifact
    # from failing the suite; a real failure fails twice. A failed try's output is kept.
    for attempt in range(2):
        result = export(cfg, tmp_path / f"out{attempt}", nodes=2, port=free_port())
        env = {
            "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
            "SLURM_NNODES": "2",
            "SLURM_JOB_ID": f"424{attempt}",
            "SLURM_JOB_NODELIST": "node[1-2]",
            "SLURM_SUBMIT_DIR": str(result.dir),
            "HOME": str(tmp_path),
        }
        outcome = _slurm_job(result.dir, env, timeout=90, args=["--metrics", "metrics", "--out", ""])
        if outcome is not None and outcome[0] == 0:
            break
        _keep_output(f"slurm_job_try{attempt}.log", outcome)
    assert outcome is not None, "job.slurm hung twice"
    returncode, out, err = outcome
    assert returncode == 0, (out[-2000:], err[-3000:])
    # two nodes x one rank shard the data like one node x two ranks: the same losses per rank
    for rank in (0, 1):
        assert script_losses(result.dir / "metrics", rank) == pytest.approx(
            workbench_losses(two_rank_run, rank), abs=1e-4
        )


@pytest.mark.slow
def test_the_script_and_the_workbench_go_on_from_each_others_saved_state(tmp_path):
    """One format: a 2-rank DDP workbench run of 16 samples a rank runs 6 steps and keeps its last
    step's state, and the one-process script of 32 a batch (the same samples a step) goes on from it
    with `--resume --state RUN_DIR`; the script runs 6 steps saving every 3, and a workbench run
    goes on from that (run.resume_from). Each continues the unbroken script's losses, within 1e-5
    (a batch's mean is summed in another order on 1 rank than across 2)."""
    base = RunConfig.smoke().replace(**{"run.steps": 8, "run.eval_batches": 0, "run.threads": 1})
    ddp = base.replace(
        **{
            "run.steps": 6,
            "run.save_every": 3,
            "distributed.nproc": 2,
            "loader.batch_size": 16,
            "run.oversubscribe": True,
        }
    )
    summary = run(ddp, tmp_path / "run", timeout_s=240)
    assert summary["status"] == "completed", summary
    one = base.replace(**{"loader.batch_size": 32})
    export(one, tmp_path / "out")

    def script(*args: str) -> subprocess.CompletedProcess:
        return run_blocked(tmp_path / "out", "--out", "", *args)

    unbroken = script("--metrics", "unbroken")
    assert unbroken.returncode == 0, unbroken.stderr[-3000:]
    proc = script("--resume", "--state", summary["run_dir"], "--metrics", "from_ddp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed after step 6 from {summary['run_dir']}/resume/step00000006" in proc.stdout
    steps = [json.loads(ln)["step"] for ln in (tmp_path / "out" / "from_ddp" / "rank0.jsonl").open()]
    assert steps == [7, 8]
    expected = script_losses(tmp_path / "out" / "unbroken")[6:]
    assert script_losses(tmp_path / "out" / "from_ddp") == pytest.approx(expected, abs=1e-5)

    half = script("--steps", "6", "--save-every", "3", "--state", "saved", "--metrics", "half")
    assert half.returncode == 0, half.stderr[-3000:]
    going_on = run(
        one.replace(**{"run.resume_from": str(tmp_path / "out" / "saved")}), tmp_path / "on", timeout_s=180
    )
    assert going_on["status"] == "completed" and going_on["resumed_from_step"] == 6, going_on
    assert workbench_losses(going_on["run_dir"]) == pytest.approx(expected, abs=1e-5)
    done = script("--resume", "--state", "saved", "--steps", "6")  # its last step: nothing to train
    assert done.returncode == 2 and "run.steps 6 is not past the resumable state" in done.stderr

    nothing = script("--resume", "--state", "nowhere")
    assert nothing.returncode == 2 and "--resume: there is no saved state in nowhere/resume" in nothing.stderr


@pytest.mark.slow
def test_a_restarted_two_rank_script_resumes_from_its_own_state(tmp_path):
    """torchrun --max-restarts 1 on the exported script: rank 1 fails at step 5, the second attempt
    goes on from the state rank 0 wrote after step 4, and steps 5-8 are a never-failed run's."""
    from launch_helpers import faulty_model

    base = RunConfig.smoke().replace(
        **{
            "run.steps": 8,
            "distributed.nproc": 2,
            "run.eval_batches": 0,
            "model.name": faulty_model(tmp_path),
        }
    )
    unbroken = run(base.replace(**{"model.kwargs": {"mode": "none"}}), tmp_path / "run", timeout_s=240)
    assert unbroken["status"] == "completed", unbroken
    from workbench.export.verify import script_command

    failing = base.replace(
        **{
            "run.save_every": 2,
            "distributed.max_restarts": 1,
            "model.kwargs": {"mode": "raise", "rank": 1, "step": 5, "attempt": 0},
        }
    )
    export(failing, tmp_path / "out")
    cmd = script_command(failing, free_port())  # the export's own command, with --max-restarts 1
    assert "--max-restarts=1" in cmd and "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in cmd
    proc = subprocess.run(
        [*cmd, "--metrics", "metrics", "--out", ""],
        cwd=tmp_path / "out",
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "resumed after step 4" in proc.stdout
    for rank in (0, 1):  # the second attempt's metrics: steps 5-8
        steps = [json.loads(ln)["step"] for ln in (tmp_path / "out" / "metrics" / f"rank{rank}.jsonl").open()]
        assert steps == [5, 6, 7, 8], (rank, steps)
        assert script_losses(tmp_path / "out" / "metrics", rank) == pytest.approx(
            workbench_losses(unbroken["run_dir"], rank)[4:], abs=1e-5
        )
