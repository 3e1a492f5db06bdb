"""Runs submitted to a real SLURM cluster (Debian's slurmctld, slurmd and munge, a cluster of this
machine in its own network namespace) and followed to their end: completed, failed with the rank's
cause, cancelled, and a job the partition can never start."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from workbench.config import RunConfig
from workbench.distributed.jobs import Job, submit
from workbench.distributed.clusters import find_cluster
from workbench.events import read_events
from workbench.runfolder import RunFolder
from workbench.runstore import list_runs
from workbench.ui.attaching import attach

from launch_helpers import assert_all_gone, faulty_model, wait_for
from slurm_helpers import local_cluster, wait_for_job_steps

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from local_cluster(tmp_path_factory.mktemp("slurm"))


def small(**changes) -> RunConfig:
    return RunConfig.smoke().replace(**{"run.threads": 1, "run.eval_batches": 0, "run.steps": 5, **changes})


def test_the_cluster_is_real_and_listens_only_in_its_namespace(cluster):
    info = cluster.run(["sinfo", "-h", "-o", "%P %t %c"]).stdout.split()
    assert info == ["debug*", "idle", "2"]
    outside = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True).stdout
    assert "slurmctld" not in outside and "slurmd" not in outside  # nothing on this machine's side


def test_submit_wait_from_the_cli_completes_and_reads_as_a_local_run(cluster, tmp_path):
    runs = tmp_path / "runs"
    env = {**cluster.env, "WORKBENCH_RUNS": str(runs)}
    proc = subprocess.run(
        [
            *cluster.prefix,
            sys.executable,
            "-m",
            "workbench",
            "submit",
            "--preset",
            "smoke",
            "--steps",
            "5",
            "--set",
            "run.threads=1",
            "--set",
            "run.eval_batches=0",
            "--wait",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["status"] == "completed" and result["slurm"]["state"] == "COMPLETED"
    assert f"SLURM job {result['slurm']['job_id']}" in proc.stderr and "running" in proc.stderr
    folder = RunFolder(result["run_dir"])
    assert folder.job()["job_id"] == result["slurm"]["job_id"] and folder.final()
    assert "#SBATCH --nodes=1" in folder.job_file.read_text()
    assert [r["step"] for r in read_events(folder.path) if r["event"] == "step"] == [1, 2, 3, 4, 5]
    row = list_runs(runs).iloc[0]
    assert row["status"] == "completed" and row["steps"] == 5


def test_two_ranks_under_torchrun_in_one_job(cluster, free_port_for_job):
    job = submit(
        small(**{"distributed.nproc": 2}), prefix=cluster.prefix, env=cluster.env, port=free_port_for_job
    )
    summary = job.wait(timeout_s=300)
    assert summary["status"] == "completed", summary
    assert {r["rank"] for r in read_events(job.run_dir) if r["event"] == "step"} == {0, 1}


@pytest.fixture
def free_port_for_job():
    from workbench.net import free_port

    return free_port()


def test_a_failing_job_names_slurm_state_and_the_rank_cause_in_one_line(cluster, tmp_path):
    cfg = small(**{"model.name": faulty_model(tmp_path), "model.kwargs": {"mode": "raise", "rank": 0}})
    job = submit(cfg, prefix=cluster.prefix, env=cluster.env)
    summary = job.wait(timeout_s=300)
    assert summary["status"] == "failed" and summary["slurm"]["state"] == "FAILED", summary
    message = summary["message"]
    assert "\n" not in message
    assert message.startswith(f"SLURM job {job.job_id} failed (exit code 1): rank 0 raised ValueError")
    assert "injected fault on rank 0" in message and summary["failed_rank"] == 0


def test_a_job_nobody_follows_records_its_own_end(cluster, tmp_path):
    done = submit(small(), prefix=cluster.prefix, env=cluster.env)
    cfg = small(**{"model.name": faulty_model(tmp_path), "model.kwargs": {"mode": "raise", "rank": 0}})
    failed = submit(cfg, prefix=cluster.prefix, env=cluster.env)
    for job in (done, failed):  # nobody waits on them: the batch script writes their end
        wait_for(lambda: not job.running(), 300, "SLURM to end the job")
    summary = RunFolder(done.run_dir).summary()
    assert summary["status"] == "completed" and summary["slurm"]["state"] == "COMPLETED", summary
    assert summary["steps"] == 5 and RunFolder(done.run_dir).final()
    summary = RunFolder(failed.run_dir).summary()
    assert summary["slurm"]["state"] == "FAILED" and summary["cause"] == "raised", summary
    assert summary["message"].startswith(f"SLURM job {failed.job_id} failed (exit code 1): rank 0 raised")


def test_cancel_stops_the_job_and_keeps_its_events(cluster, tmp_path):
    cfg = small(**{"run.steps": 100000, "run.save_weights": False})
    job = submit(cfg, prefix=cluster.prefix, env=cluster.env)
    wait_for_job_steps(job, ranks=1, step=2)
    pids = {r["pid"] for r in read_events(job.run_dir) if r["event"] == "start"}
    job.cancel()
    summary = job.wait(timeout_s=120)
    assert summary["status"] == "stopped" and summary["slurm"]["state"] == "CANCELLED", summary
    assert summary["cause"] == "slurm_cancelled" and "cancelled with scancel" in summary["message"]
    assert summary["steps"] >= 2 and RunFolder(job.run_dir).final()
    assert_all_gone(pids, within=30)


def test_a_job_at_its_time_limit_is_named_timeout_with_its_last_step(cluster):
    """SLURM's limits are whole minutes, checked about every 30 s; a running job's limit set to 0
    makes SLURM end it at its next check instead of a minute and a half later."""
    cfg = small(**{"run.steps": 100000, "run.save_weights": False})
    job = submit(cfg, prefix=cluster.prefix, env=cluster.env)
    wait_for_job_steps(job, ranks=1, step=2)
    pids = {r["pid"] for r in read_events(job.run_dir) if r["event"] == "start"}
    shortened = cluster.run(["scontrol", "update", f"JobId={job.job_id}", "TimeLimit=0"])
    assert shortened.returncode == 0, shortened.stderr
    summary = job.wait(timeout_s=180)
    assert (summary["status"], summary["cause"]) == ("failed", "slurm_timeout"), summary
    assert summary["slurm"]["state"] == "TIMEOUT" and "\n" not in summary["message"]
    assert summary["message"].startswith(f"SLURM job {job.job_id} timeout")
    assert f"at its time limit after step {summary['steps']}" in summary["message"]
    assert summary["steps"] >= 2 and RunFolder(job.run_dir).final()
    assert_all_gone(pids, within=30)


def test_stop_in_the_attached_dashboard_cancels_the_job(cluster):
    cfg = small(**{"run.steps": 100000, "run.save_weights": False})
    job = submit(cfg, prefix=cluster.prefix, env=cluster.env)
    wait_for_job_steps(job, ranks=1, step=2)
    dash = attach(job.run_dir, start=False, job=Job(job.run_dir, prefix=cluster.prefix, env=cluster.env))
    assert dash.stop_button is not None and dash.stop_button in dash.widget.children
    dash.stop_button.click()
    assert dash.stop_button.disabled
    summary = job.wait(timeout_s=120)
    assert summary["status"] == "stopped" and summary["slurm"]["state"] == "CANCELLED", summary
    assert "stopped from the notebook (scancel)" in summary["message"]
    assert attach(job.run_dir, start=False).stop_button is not None  # any SLURM run folder has one


def test_a_job_the_partition_can_never_start_says_so_instead_of_waiting(cluster, monkeypatch):
    from workbench.distributed import jobs

    # what the checks before sbatch would refuse, let through: SLURM's own word must be heard too
    monkeypatch.setattr(jobs, "check_submittable", lambda *a, **k: None)
    job = submit(small(), nodes=3, prefix=cluster.prefix, env=cluster.env)
    summary = wait_for(lambda: job.wait(timeout_s=120), 130, "the follower to give up")
    assert summary["status"] == "failed" and summary["cause"] == "unschedulable", summary
    assert "SLURM can never start it" in summary["message"]
    assert not Job(job.run_dir, cluster.prefix, cluster.env).running()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"time_limit": "soon"}, "--time 'soon' is not a SLURM time"),
        ({"nodes": 99}, r"--nodes 99 is more than the 1 node\(s\) the cluster has"),
        ({"cpus_per_task": 64}, "64 CPUs a node .* is more than the 2 the largest node has"),
    ],
)
def test_what_slurm_would_refuse_is_refused_before_a_folder_is_made(cluster, tmp_path, change, message):
    from workbench.config import ConfigError

    with pytest.raises(ConfigError, match=message) as e:
        submit(small(), prefix=cluster.prefix, env=cluster.env, run_dir=tmp_path / "refused", **change)
    assert "\n" not in str(e.value) and not (tmp_path / "refused").exists()


def test_without_slurm_submit_says_how_to_start_a_cluster_and_makes_nothing(tmp_path):
    runs = tmp_path / "runs"
    env = {**os.environ, "WORKBENCH_RUNS": str(runs), "PATH": os.path.dirname(sys.executable)}
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "submit", "--preset", "smoke"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "SLURM is not installed here" in proc.stderr and "make slurm-up" in proc.stderr
    assert not runs.exists()


def test_find_cluster_reaches_the_local_cluster_or_says_how_to_start_one(cluster, tmp_path, monkeypatch):
    access, where = find_cluster(cluster.folder)
    assert access is not None and str(cluster.folder) in where
    (tmp_path / "repo" / "notebooks").mkdir(parents=True)  # make slurm-up's place, seen from a
    (tmp_path / "repo" / "slurm-cluster").symlink_to(cluster.folder)  # notebook one level down
    monkeypatch.chdir(tmp_path / "repo" / "notebooks")
    assert find_cluster()[0] is not None
    monkeypatch.chdir(tmp_path)
    job = submit(small(), prefix=access.prefix, env=access.env)
    assert job.wait(timeout_s=180)["status"] == "completed"
    nothing, why = find_cluster(tmp_path)  # no cluster started there, none configured
    assert nothing is None and "make slurm-up" in why and str(tmp_path) in why


def test_a_relative_runs_folder_is_submitted_from_anywhere(cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # runs/ relative to here, as a notebook's default config has it
    monkeypatch.delenv("WORKBENCH_RUNS", raising=False)
    job = submit(small(**{"run.runs_dir": "runs"}), prefix=cluster.prefix, env=cluster.env)
    assert job.run_dir.is_absolute() and job.run_dir.parent == tmp_path / "runs"
    assert job.wait(timeout_s=180)["status"] == "completed"


def test_a_requeued_job_resumes_from_its_last_saved_step_on_the_same_trajectory(cluster, tmp_path):
    """run.save_every: a job SLURM requeues mid-run (as after a node failure or a preemption) runs
    again as attempt 1, goes on after its last saved step, and its losses are a local run's."""
    from workbench.distributed.launch import run

    cfg = small(
        **{
            "model.name": faulty_model(tmp_path),
            "model.kwargs": {"mode": "slow"},
            "run.steps": 60,
            "run.save_every": 10,
        }
    )
    job = submit(cfg, prefix=cluster.prefix, env=cluster.env)
    assert "#SBATCH --requeue" in RunFolder(job.run_dir).job_file.read_text()
    wait_for_job_steps(job, ranks=1, step=25)
    assert cluster.run(["scontrol", "requeue", job.job_id]).returncode == 0
    summary = job.wait(timeout_s=300)
    assert summary["status"] == "completed" and summary["attempts"] == 2, summary
    records = read_events(job.run_dir)
    saved = summary["resumed_from_step"]
    assert saved >= 20 and saved % 10 == 0 and summary["steps"] == 60
    assert [r["from_step"] for r in records if r["event"] == "resumed"] == [saved]
    resumed = {r["step"]: r["loss"] for r in records if r["event"] == "step" and r["attempt"] == 1}
    clean = run(cfg.replace(**{"model.kwargs": {"mode": "none"}, "run.save_every": 0}), timeout_s=240)
    never_failed = {
        r["step"]: r["loss"]
        for r in read_events(clean["run_dir"])
        if r["event"] == "step" and r["step"] > saved
    }
    assert resumed.keys() == never_failed.keys() == set(range(saved + 1, 61))
    assert resumed == pytest.approx(never_failed, abs=1e-5)


def test_the_run_panel_submits_a_job_follows_it_and_its_stop_cancels_it(cluster):
    from workbench.distributed.clusters import Access
    from workbench.ui.panel import RunPanel

    panel = RunPanel(small(**{"run.steps": 100000, "run.save_weights": False}))
    job = panel.submit(Access(cluster.prefix, cluster.env, "the test cluster"))
    assert job is panel.handle and f"as SLURM job {job.job_id}" in panel.status.value
    wait_for_job_steps(job, ranks=1, step=2)
    panel.stop_button.click()
    assert panel.wait(180)
    assert panel.result["status"] == "stopped" and panel.result["slurm"]["state"] == "CANCELLED"
    assert "stopped from the run panel (scancel)" in panel.result["message"]
    assert panel.run_dirs == [job.run_dir] and panel.stop_button.disabled and not panel.run_button.disabled


def test_a_job_that_ended_unwatched_gets_slurms_cause_when_its_runs_are_listed(
    cluster, tmp_path, monkeypatch
):
    from workbench.cli import main as cli

    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path / "runs"))
    (tmp_path / "slurm-cluster").symlink_to(cluster.folder)  # where make slurm-up puts it
    monkeypatch.chdir(tmp_path)
    job = submit(small(**{"run.steps": 100_000}), prefix=cluster.prefix, env=cluster.env)
    wait_for_job_steps(job, ranks=1, step=2)
    cluster.run(["scancel", job.job_id])  # from outside: no one follows the job, no stop reason
    wait_for(lambda: not job.running(), 120, "SLURM to end the job")
    own = RunFolder(job.run_dir).summary()  # the job recorded its own end as it ended
    assert own["cause"] == "slurm_cancelled" and own["slurm"]["state"] == "CANCELLED", own
    assert RunFolder(job.run_dir).final()
    # a job that could not (its batch host lost, a SIGKILL) is reconciled when its runs are listed
    RunFolder(job.run_dir).write_summary({"status": "stopped", "message": "stopped by signal SIGTERM"})
    assert cli(["runs", "--json"]) == 0
    summary = RunFolder(job.run_dir).summary()
    assert summary["cause"] == "slurm_cancelled" and summary["slurm"]["state"] == "CANCELLED", summary
