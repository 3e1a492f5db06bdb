"""A SLURM cluster of two hosts (two network namespaces with their own addresses in 198.18.0.0/15,
one slurmd each, the controller on the first): a submitted 2-node job whose rendezvous crosses the
link between them, host B's torchrun agent killed with no restarts left, a job submitted with
`workbench submit --nodes 2 --wait` surviving the loss of host B's rank by resuming, a run panel's
2-node job stopped from the panel, an exported job.slurm submitted as a person would, and host B's
link cut mid-job."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from workbench.config import RunConfig
from workbench.distributed.jobs import ENDED, Job, submit
from workbench.distributed.clusters import Access
from workbench.distributed.launch import run
from workbench.events import NODE, read_events
from workbench.export import export
from workbench.export.verify import run_script
from workbench.runfolder import RunFolder
from workbench.runstore import list_runs

from launch_helpers import assert_all_gone, faulty_model, wait_for, wait_for_steps
from slurm_helpers import local_cluster, wait_for_job_steps

pytestmark = pytest.mark.slow

STEPS, SAVE_EVERY, PORT = 40, 10, 29500


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from local_cluster(tmp_path_factory.mktemp("slurm2"), nodes=2)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return faulty_model(tmp_path_factory.mktemp("model"))


def two_ranks(model: str, **changes) -> RunConfig:
    """One rank per node (a slow step, so a run can be caught mid-way), on the CPU."""
    return RunConfig.smoke().replace(
        **{
            "run.threads": 1,
            "run.eval_batches": 0,
            "run.steps": STEPS,
            "run.save_weights": False,
            "model.name": model,
            "model.kwargs": {"mode": "slow"},
            **changes,
        }
    )


@pytest.fixture(scope="module")
def unbroken(model, tmp_path_factory):
    """Each rank's loss per step in a local 2-rank run of the same config: the trajectory."""
    result = run(
        two_ranks(model, **{"distributed.nproc": 2}), tmp_path_factory.mktemp("unbroken"), timeout_s=240
    )
    assert result["status"] == "completed", result
    return losses(result["run_dir"])


def losses(run_dir, attempt: int | None = None) -> dict[tuple[int, int], float]:
    return {
        (r["rank"], r["step"]): r["loss"]
        for r in read_events(run_dir)
        if r["event"] == "step" and attempt in (None, r["attempt"])
    }


def namespace_of(pid: int) -> str:
    """The test host (network namespace) a process runs in."""
    inode = os.stat(f"/proc/{pid}/ns/net").st_ino
    for name in os.listdir("/var/run/netns"):
        if os.stat(f"/var/run/netns/{name}").st_ino == inode:
            return name
    return ""


def ranks_by_host(cluster, run_dir, attempt: int = 0) -> dict[int, int]:
    """Host index (0: A, the head; 1: B) -> the pid of the rank running there."""
    starts = [r for r in read_events(run_dir) if r["event"] == "start" and r["attempt"] == attempt]
    return {cluster.namespaces.index(namespace_of(r["pid"])): r["pid"] for r in starts}


def listeners(namespace: str) -> list[tuple[str, int]]:
    """(local address, pid) of every listening TCP socket in a test host."""
    out = subprocess.run(
        ["ip", "netns", "exec", namespace, "ss", "-Hltnp"], capture_output=True, text=True, check=True
    ).stdout
    found = []
    for line in out.splitlines():
        local, procs = line.split()[3], line.split("users:")[-1]
        found += [(local, int(p.split("=")[1])) for p in procs.split(",") if p.startswith("pid=")]
    return found


def test_a_two_node_job_meets_on_the_test_network_and_losing_host_b_names_that_node(cluster, model):
    """One job, followed while it runs: where its ranks and stores are; then host B's torchrun
    agent is killed, with no restarts left."""
    cfg = two_ranks(model, **{"run.steps": 100000, "distributed.timeout_s": 20})
    job = submit(cfg, nodes=2, port=PORT, prefix=cluster.prefix, env=cluster.env)
    assert "#SBATCH --nodes=2" in job.folder.job_file.read_text()
    assert job.folder.config().distributed.nnodes == 2
    wait_for_job_steps(job, ranks=2, step=2)
    ranks = ranks_by_host(cluster, job.run_dir)  # each rank on its own host
    assert sorted(ranks) == [0, 1]
    agents = {host: psutil.Process(pid).ppid() for host, pid in ranks.items()}
    starts = [r for r in read_events(job.run_dir) if r["event"] == "start"]
    assert {r["master_addr"] for r in starts} == {cluster.addresses[0]}  # they met on host A
    # the rendezvous store (A's agent), the group's store (rank 0) and gloo listen on each host's
    # own address on the link, never on every interface; gloo uses the link toward A
    for host in (0, 1):
        bound = [a for a, pid in listeners(cluster.namespaces[host]) if pid in (ranks[host], agents[host])]
        assert bound and {a.rpartition(":")[0] for a in bound} == {cluster.addresses[host]}, bound
        env = psutil.Process(ranks[host]).environ()
        assert env["GLOO_SOCKET_IFNAME"] == cluster.network.hosts[host].interface
    assert (f"{cluster.addresses[0]}:{PORT}", agents[0]) in listeners(cluster.namespaces[0])

    os.kill(agents[1], signal.SIGKILL)  # host B's torchrun agent: its rank dies with it
    wait_for(lambda: job.state().ended, cfg.distributed.timeout_s + 15, "the job to end")
    summary = job.wait(timeout_s=60)
    assert summary["status"] == "failed" and summary["slurm"]["state"] == "FAILED", summary
    message = summary["message"]
    assert summary["cause"] == "node_lost" and summary["failed_rank"] == 1, summary
    assert f"lost node {cluster.nodes[1]}" in message and "\n" not in message, message
    assert_all_gone(set(ranks.values()) | set(agents.values()), within=30)
    for namespace in cluster.namespaces:  # nothing of the run left listening on either host
        assert not [
            pid
            for _, pid in listeners(namespace)
            if str(job.run_dir) in " ".join(psutil.Process(pid).cmdline())
        ]


def test_a_rank_lost_on_host_b_resumes_from_the_last_saved_step_on_the_same_trajectory(
    cluster, model, unbroken, tmp_path
):
    """Submitted from the command line, as a person would: `workbench submit --config ... --nodes 2
    --wait` follows the job through the loss of host B's rank and the restart on both hosts, and
    exits 0 with a run folder that reads as a local run's."""
    cfg = two_ranks(model, **{"run.save_every": SAVE_EVERY, "distributed.max_restarts": 1})
    cfg.save(tmp_path / "config.json")
    runs = tmp_path / "runs"
    cli = subprocess.Popen(
        [
            *cluster.prefix,
            sys.executable,
            "-m",
            "workbench",
            "submit",
            "--config",
            str(tmp_path / "config.json"),
            "--nodes",
            "2",
            "--wait",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**cluster.env, "WORKBENCH_RUNS": str(runs)},
    )
    try:
        run_dir = wait_for(
            lambda: runs.is_dir() and next((d for d in runs.iterdir() if RunFolder(d).job()), None),
            60,
            "the job id recorded",
        )
        job_id = RunFolder(run_dir).job()["job_id"]
        wait_for_steps(run_dir, ranks=2, step=SAVE_EVERY + 5, timeout=180)
        os.kill(ranks_by_host(cluster, run_dir)[1], signal.SIGKILL)
        out, err = cli.communicate(timeout=300)
    finally:
        if cli.poll() is None:  # the test failed while the job went on: end both
            cli.kill()
            cli.wait()
            Job(run_dir, cluster.prefix, cluster.env).cancel()
    assert cli.returncode == 0, err[-3000:]
    assert f"SLURM job {job_id}, run folder {run_dir}" in err and f"job {job_id} running" in err
    summary = json.loads(out)
    assert summary["run_dir"] == str(run_dir) and summary["slurm"]["job_id"] == job_id
    assert summary["status"] == "completed" and summary["steps"] == STEPS, summary
    saved = summary["resumed_from_step"]
    assert saved >= SAVE_EVERY and saved % SAVE_EVERY == 0
    assert summary["attempts"] == 2 and summary["restarts"][0]["cause"] == "killed", summary
    again_on = {r[NODE] for r in read_events(run_dir) if r["event"] == "start" and r["attempt"] == 1}
    assert again_on == set(cluster.nodes)  # both ranks came back, each on its own host
    records = read_events(run_dir)
    assert [r["from_step"] for r in records if r["event"] == "resumed"] == [saved, saved]
    # both ranks, on both hosts, came back as attempt 1 and went on after the saved step; before
    # and after, each rank's losses are a local 2-rank run's, and the replicas end identical
    again = losses(run_dir, attempt=1)
    assert again.keys() == {(rank, step) for rank in (0, 1) for step in range(saved + 1, STEPS + 1)}
    assert again == pytest.approx({k: unbroken[k] for k in again}, abs=1e-5)
    first = losses(run_dir, attempt=0)
    assert first and first == pytest.approx({k: unbroken[k] for k in first}, abs=1e-5)
    done = [r for r in records if r["event"] == "done"]
    assert len(done) == 2 and done[0]["param_sum"] == done[1]["param_sum"]
    folder = RunFolder(run_dir)  # read as a local run: its config, its summary, the runs table
    assert folder.config().distributed.nnodes == 2 and folder.final()
    assert "#SBATCH --nodes=2" in folder.job_file.read_text()
    row = list_runs(runs).iloc[0]
    assert row["status"] == "completed" and row["steps"] == STEPS and row["world_size"] == 2


def test_the_run_panel_submits_a_two_node_job_and_its_stop_cancels_it_on_both_hosts(cluster):
    from workbench.ui.panel import RunPanel

    panel = RunPanel(
        RunConfig.smoke().replace(
            **{"run.threads": 1, "run.eval_batches": 0, "run.steps": 100000, "run.save_weights": False}
        )
    )
    job = panel.submit(Access(cluster.prefix, cluster.env, "the two-host test cluster"), nodes=2)
    assert job is panel.handle and f"as SLURM job {job.job_id} on 2 rank(s)" in panel.status.value
    wait_for_job_steps(job, ranks=2, step=2)
    ranks = ranks_by_host(cluster, job.run_dir)
    assert sorted(ranks) == [0, 1]
    agents = {psutil.Process(pid).ppid() for pid in ranks.values()}
    panel.stop_button.click()
    assert panel.wait(180)
    result = panel.result
    assert result["status"] == "stopped" and result["cause"] == "slurm_cancelled", result
    assert result["slurm"]["state"] == "CANCELLED" and "\n" not in result["message"]
    assert result["message"] == f"SLURM job {job.job_id} cancelled: stopped from the run panel (scancel)"
    steps = {r["rank"] for r in read_events(job.run_dir) if r["event"] == "step" and r["step"] >= 2}
    assert steps == {0, 1} and RunFolder(job.run_dir).final()  # both hosts' events kept
    assert panel.stop_button.disabled and not panel.run_button.disabled
    wait_for(lambda: not job_processes(job.job_id), 30, "every process of the job to end")
    assert_all_gone(set(ranks.values()) | agents, within=30)


def script_losses(metrics: Path, rank: int) -> list[float]:
    """An exported train.py's losses per step (--metrics), for one rank."""
    return [json.loads(line)["loss"] for line in (metrics / f"rank{rank}.jsonl").open()]


def job_processes(job_id: str) -> list[int]:
    """Every process of a SLURM job, on either host: SLURM gives each its job id, and names each
    step's slurmstepd after the job."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("SLURM_JOB_ID") == job_id or " ".join(proc.cmdline()).startswith(
                f"slurmstepd: [{job_id}."
            ):
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def test_an_exported_job_runs_on_both_hosts_with_a_local_two_rank_runs_losses(cluster, tmp_path):
    """The export's own job.slurm, submitted from its folder with sbatch: one rank per node, the
    rendezvous on the head's address; its losses are the export's 2-rank run's on this machine."""
    cfg = RunConfig.smoke().replace(
        **{"run.steps": 5, "run.threads": 1, "run.eval_batches": 0, "run.device": "cpu"}
    )  # no GPUs asked of the test nodes
    here = export(cfg.replace(**{"distributed.nproc": 2}), tmp_path / "local")
    local = run_script(here.dir, timeout_s=240)  # the export's single-node command: torchrun, 2 ranks
    there = export(cfg, tmp_path / "job", nodes=2, port=29511)
    batch = (there.dir / "job.slurm").read_text()
    assert "#SBATCH --nodes=2" in batch and '--rdzv-endpoint="$head_addr:29511"' in batch
    env = {**cluster.env, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    # the test nodes have 2 CPUs each; options after job.slurm go to train.py
    out = subprocess.run(
        [
            *cluster.prefix,
            "sbatch",
            "--parsable",
            "--cpus-per-task=2",
            "job.slurm",
            "--metrics",
            "metrics",
            "--out",
            "",
        ],
        cwd=there.dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    job_id = out.stdout.strip().split(";")[0]
    assert out.returncode == 0 and job_id.isdigit(), out.stderr
    show = lambda: cluster.run(["scontrol", "show", "job", "-o", job_id]).stdout  # noqa: E731
    state = lambda: re.search(r"JobState=(\S+)", show()).group(1)  # noqa: E731
    wait_for(lambda: state() in ENDED, 240, "the exported job to end")
    log = next(there.dir.glob(f"*-{job_id}.out")).read_text()
    assert state() == "COMPLETED", log[-3000:]
    assert "NumNodes=2" in show() and f"rendezvous on {cluster.addresses[0]}:29511" in log
    for rank in (0, 1):
        ours = script_losses(there.dir / "metrics", rank)
        assert len(ours) == 5 and ours == pytest.approx(script_losses(local, rank), abs=1e-5)
    wait_for(lambda: not job_processes(job_id), 30, "every process of the job to end")


TIMEOUT_S = 20


def test_host_b_cut_off_mid_job_names_that_node_and_nothing_is_left_once_it_is_back(cluster, model):
    """Host B's link goes down (`ip link set down` in B's namespace) while both ranks train: srun
    cannot reach B's task, slurmctld finds node1 silent and sets it DOWN (SlurmdTimeout, 10 s on
    the test cluster), and the job ends NODE_FAIL naming node1. Once the link is back, B's slurmd
    reports in, SLURM ends what was left of the job there, and node1 is idle again."""
    cfg = two_ranks(model, **{"run.steps": 100000, "distributed.timeout_s": TIMEOUT_S})
    job = submit(cfg, nodes=2, port=PORT, prefix=cluster.prefix, env=cluster.env)
    wait_for_job_steps(job, ranks=2, step=3)
    ranks = ranks_by_host(cluster, job.run_dir)
    tree = set(ranks.values()) | {psutil.Process(pid).ppid() for pid in ranks.values()}
    cut = time.monotonic()
    cluster.network.set_link(1, up=False)
    try:
        wait_for(lambda: job.state().ended, TIMEOUT_S + 120, "the job to end")
        took = time.monotonic() - cut
    finally:
        cluster.network.set_link(1, up=True)
    summary = job.wait(timeout_s=60)
    message = summary["message"]
    assert summary["status"] == "failed" and summary["slurm"]["state"] == "NODE_FAIL", summary
    assert summary["cause"] == "node_lost" and summary["failed_rank"] == 1, summary
    assert f"lost node {cluster.nodes[1]}: SLURM found it not answering" in message, message
    assert "\n" not in message
    # rank 0 waits out its collective's timeout before it heeds SLURM's SIGTERM; then the step's
    # end and slurmctld's bookkeeping: allow a few seconds for a loaded machine
    print(f"the job ended {took:.1f} s after the cut (distributed.timeout_s={TIMEOUT_S})")
    assert took < TIMEOUT_S + 15, took
    assert_all_gone(tree, within=60)  # the ranks and agents on both hosts
    # B's slurmstepd waits to report the step's end to a controller it cannot reach; once it can,
    # it does and ends, and slurmctld puts node1 back in service (ReturnToService=2)
    wait_for(lambda: not job_processes(job.job_id), 120, "every process of the job to end")
    node_states = lambda: cluster.run(["sinfo", "-h", "-N", "-o", "%N %t"]).stdout.split()  # noqa: E731
    wait_for(lambda: node_states() == ["node0", "idle", "node1", "idle"], 120, "node1 back, idle", interval=1)
