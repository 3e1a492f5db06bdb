"""Runs submitted to a SLURM cluster and followed to their end, from the notebook or the CLI.

    job = submit(cfg)               # claim a run folder, write job.slurm there, sbatch it
    job.state()                     # JobState: SLURM's word and why (pending for resources, ...)
    job.wait()                      # follow it until it ends; returns the run's final summary
    job.cancel()                    # scancel

The run folder is the same as a local run's (it must be on a file system the nodes share): the
ranks append their events there, so the dashboard draws a job as it draws a local run, and the
batch file sends SLURM's output to the folder's launcher log. Once the job has ended, the follower
writes the final summary with the diagnosis a local run gets (workbench.distributed.faults) and
SLURM's own state in one line. A job SLURM can never start (more nodes or CPUs than its partition
has) is cancelled with that reason instead of waiting forever.

The SLURM commands are the ones on PATH, with this process's environment (SLURM_CONF). `prefix`
runs them through another program (the test cluster's network namespace,
workbench.distributed.clusters); it is given by the caller, never read from the run folder, so
reading a folder runs nothing it names.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..config import ConfigError, RunConfig, require_config
from ..machine.threads import threads_for
from ..runfolder import FINAL_KEY, RunFolder, error_type_of
from ..runstore import create_run_dir, read_summary
from ..train.rank import ATTEMPT_BASE_ENV
from .faults import finish_summary, last_step
from .clusters import find_cluster
from .slurm import per_node, shell_word, slurm_job
from .torchrun import RESTART_ENV, WORKER, loopback_runner, torchrun_args

# SLURM's job states that end a job, and what the run's status becomes.
ENDED = {
    "COMPLETED": "completed",
    "FAILED": "failed",
    "CANCELLED": "stopped",
    "TIMEOUT": "failed",
    "NODE_FAIL": "failed",
    "OUT_OF_MEMORY": "failed",
    "PREEMPTED": "stopped",
    "BOOT_FAIL": "failed",
    "DEADLINE": "failed",
}
# Reasons a pending job gives when its partition can never run it as asked.
NEVER = {
    "PartitionNodeLimit",
    "PartitionConfig",
    "PartitionTimeLimit",
    "BadConstraints",
    "PartitionDown",
    "InvalidAccount",
    "InvalidQOS",
    "Resources_Unavailable",
}
POLL_S = 1.0
# The word a job ending under its own batch script will get, by the reason SLURM gives meanwhile
# (JobState COMPLETING): seen on the local cluster for a time limit and a node set DOWN.
ENDED_BY = {"TimeLimit": "TIMEOUT", "NodeDown": "NODE_FAIL"}


@dataclass
class JobState:
    state: str  # SLURM's JobState: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
    reason: str  # why it waits or ended ("None" when SLURM gives none)
    exit_code: int | None  # the batch script's exit code once it has one
    signal: int | None = None  # the signal that ended the batch script, if any

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def never_starts(self) -> bool:
        return self.state == "PENDING" and self.reason in NEVER

    def __str__(self) -> str:
        why = f" ({self.reason})" if self.reason not in ("None", "") else ""
        return f"{self.state.lower()}{why}"


def _node_cpus(cfg: RunConfig) -> int:
    """CPUs a node's task asks for: every rank's threads."""
    return cfg.distributed.nproc * threads_for(cfg)


def job_script(
    cfg: RunConfig,
    run_dir: Path,
    nodes: int = 1,
    port: int = 29500,
    time_limit: str = "00:30:00",
    cpus_per_task: int | None = None,
) -> str:
    """The batch file of a submitted run, from the one SLURM template: one task per node, running
    the worker (one rank) or torchrun (several), output to the run folder's launcher log."""
    folder = RunFolder(Path(run_dir).resolve())
    worker = [sys.executable, *WORKER, "--config", str(folder.config_file)]
    if nodes * cfg.distributed.nproc == 1:
        line = shlex.join(worker)
    else:
        line = per_node(
            torchrun_args(
                worker[1:],
                nproc=cfg.distributed.nproc,
                nnodes="$SLURM_NNODES",
                node_rank="$SLURM_NODEID",
                endpoint=f"$head_addr:{port}",
                max_restarts=cfg.distributed.max_restarts,
                log_dir=f"{folder.torchrun_logs}_node$SLURM_NODEID",
                runner=loopback_runner(),
            )
        )  # each node finds its own address toward the head
    env = {
        **RESTART_ENV,
        "OMP_NUM_THREADS": str(threads_for(cfg)),
        "PYTHONUNBUFFERED": "1",
        ATTEMPT_BASE_ENV: f"$(( ${{SLURM_RESTART_COUNT:-0}} * {cfg.distributed.max_restarts + 1} ))",
    }
    setup = "\n".join(f"export {k}={v if k == ATTEMPT_BASE_ENV else shell_word(v)}" for k, v in env.items())
    return slurm_job(
        line,
        name=f"workbench-{folder.path.name}"[:60],
        nodes=nodes,
        nproc=cfg.distributed.nproc,
        gpus=cfg.run.device == "cuda",
        port=port,
        cpus_per_task=cpus_per_task or _node_cpus(cfg),
        time_limit=time_limit,
        setup=setup,
        output=str(folder.log_file),
        requeue=cfg.run.save_every > 0,
        submit="workbench submit wrote this; it follows the job to its end",
        ended=shlex.join([sys.executable, "-m", "workbench", "submit", str(folder.path), "--job-ended"]),
    )


class Job:
    """A run submitted to SLURM: its run folder and its job id. A run panel follows it as it follows
    a local run (workbench.distributed.launch.RunHandle): running(), stop(), wait(), summary()."""

    notes: tuple = ()  # what a local launch's pre-launch check overrode: nothing here
    threads = None  # chosen inside the job (its batch file), not by this process
    warm = False

    def __init__(
        self, run_dir: str | Path, prefix: list[str] | None = None, env: dict[str, str] | None = None
    ):
        self.folder = RunFolder(run_dir)
        record = self.folder.job()
        if record is None:
            raise ConfigError(
                f"{str(run_dir)!r} holds no SLURM job (no "
                f"{self.folder.job_record_file.name}); submit one with "
                "`workbench submit`"
            )
        self.job_id = str(record.get("job_id", ""))
        if not self.job_id.isdigit():
            raise ConfigError(f"{str(self.folder.job_record_file)!r} names no job id; the folder is damaged")
        if prefix is None and env is None:  # the cluster submit found, by the same rule
            access, _ = find_cluster()
            prefix, env = (access.prefix, access.env) if access else ([], None)
        self.prefix = list(prefix or [])
        self.env = env or dict(os.environ)

    @property
    def run_dir(self) -> Path:
        return self.folder.path

    def _slurm(self, command: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*self.prefix, *command], capture_output=True, text=True, env=self.env, timeout=timeout
        )

    def state(self) -> JobState:
        """What SLURM says of the job now (scontrol: it keeps an ended job for MinJobAge)."""
        out = self._slurm(["scontrol", "show", "job", "-o", self.job_id])
        text = out.stdout
        if out.returncode != 0 or "JobState=" not in text:
            raise ConfigError(
                f"SLURM no longer knows job {self.job_id}: {(out.stderr.strip() or text.strip())[-300:]}"
            )
        field = lambda name: (re.search(rf"\b{name}=(\S+)", text) or [None, ""])[1]  # noqa: E731
        code, _, sig = field("ExitCode").partition(":")
        return JobState(
            field("JobState"),
            field("Reason"),
            int(code) if code.isdigit() else None,
            int(sig) if sig.isdigit() and int(sig) else None,
        )

    @property
    def command(self) -> list[str]:
        return [*self.prefix, "sbatch", str(self.folder.job_file)]

    def stop(self) -> None:
        self.cancel("stopped from the run panel (scancel)")

    def summary(self) -> dict:
        return read_summary(self.run_dir)

    def cancel(self, reason: str = "cancelled with scancel by the user") -> None:
        """scancel the job; the run is recorded as stopped, with `reason`."""
        try:
            self.folder.ask_stop(reason)
        except OSError:
            pass
        self._slurm(["scancel", self.job_id])

    def wait(self, timeout_s: float | None = None, on_state=None) -> dict:
        """Follow the job until it ends (or `timeout_s`: then it is cancelled); write and return
        the run's final summary. `on_state` is called with each new JobState."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        seen = None
        while True:
            state = self.state()
            if str(state) != seen:
                seen = str(state)
                if on_state is not None:
                    on_state(state)
            if state.ended:
                own = self.summary()  # what the job recorded of its own end, when it could
                return own if "slurm" in own else self.finish(state)
            if state.never_starts:
                self.cancel(
                    f"SLURM can never start it: {state.reason} (the partition has fewer "
                    "nodes, CPUs or time than the job asks for)"
                )
                self._wait_ended()
                return self.finish(self.state(), never=state.reason)
            if deadline is not None and time.monotonic() > deadline:
                self.cancel(f"not ended after {timeout_s:g} s ({state}): cancelled")
                self._wait_ended()
                return self.finish(self.state())
            time.sleep(POLL_S)

    def _wait_ended(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.state().ended:
            time.sleep(POLL_S)

    def finish(self, state: JobState, never: str | None = None) -> dict:
        """The final summary: the local diagnosis of the ranks' events and the launcher log, with
        SLURM's state in front of it."""
        cfg = self.folder.config()
        reason = self.folder.stop_reason()
        returncode = state.exit_code if state.exit_code is not None else 1
        if state.signal:
            returncode = -state.signal
        stop = None
        if state.state in ("CANCELLED", "PREEMPTED"):
            stop = {
                "cause": "slurm_cancelled" if never is None else "unschedulable",
                "message": reason or f"SLURM {state}",
            }
        summary = finish_summary(
            self.run_dir,
            cfg.distributed.world_size,
            0 if state.state == "COMPLETED" else returncode,
            stop=stop,
        )
        step = last_step(self.run_dir)
        summary.setdefault("steps", step)  # a rank stopped by scancel's SIGTERM wrote no count
        if state.state == "TIMEOUT":
            summary.update(
                status="failed",
                cause="slurm_timeout",
                error_type=error_type_of("slurm_timeout"),
                message=f"SLURM ended the job at its time limit after step {step}",
            )
        elif never is not None:
            summary.update(status="failed", cause="unschedulable", error_type=error_type_of("unschedulable"))
        head = f"SLURM job {self.job_id} {state.state.lower()}"
        if state.exit_code:
            head += f" (exit code {state.exit_code})"
        if summary.get("message"):
            summary["message"] = f"{head}: {summary['message']}"
        elif summary.get("status") != "completed":
            summary["message"] = head
        summary["slurm"] = {
            "job_id": self.job_id,
            "state": state.state,
            "reason": state.reason,
            "exit_code": state.exit_code,
        }
        self.folder.write_summary(summary)
        return summary

    def record_end(self, how: str) -> dict:
        """Inside the job, as its batch script ends: the final summary, as `wait` would write it.
        `how`: srun's exit code, or TERM when SLURM signalled the script (scancel, the time limit),
        whose word for it scontrol gives."""
        if how.lstrip("-").isdigit():
            code = int(how)
            return self.finish(JobState("COMPLETED" if code == 0 else "FAILED", "None", code, None))
        try:
            state = self.state()
        except (ConfigError, OSError, subprocess.TimeoutExpired):
            state = JobState("CANCELLED", "None", None, None)  # a SIGTERM SLURM gives no word for
        if not state.ended:  # while its script still runs the job is COMPLETING; the reason says why
            state = JobState(ENDED_BY.get(state.reason, "CANCELLED"), state.reason, None, None)
        return self.finish(state)

    def running(self) -> bool:
        try:
            return not self.state().ended
        except ConfigError:
            return False


# SLURM's --time: minutes, minutes:seconds, hours:minutes:seconds, days-hours[:minutes[:seconds]]
TIME_FORMAT = re.compile(r"^(\d+(:\d{1,2}){0,2}|\d+-\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE)$", re.I)


def check_submittable(
    cfg: RunConfig, nodes: int, time_limit: str, cpus: int, prefix: list[str], env: dict[str, str]
) -> None:
    """What SLURM would refuse, or never start, refused here in one line before a run folder is
    made: the time format, and nodes and CPUs a node against what `sinfo` says the cluster has."""
    if not TIME_FORMAT.match(str(time_limit)):
        raise ConfigError(
            f"--time {time_limit!r} is not a SLURM time: minutes, MM:SS, HH:MM:SS or "
            "D-HH[:MM[:SS]] (e.g. 00:30:00)"
        )
    try:
        out = subprocess.run(
            [*prefix, "sinfo", "-h", "-N", "-o", "%N %c"], capture_output=True, text=True, env=env, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ConfigError(
            f"sinfo could not be run ({type(e).__name__}: {e}): SLURM's commands "
            "(sinfo, sbatch) must be on PATH"
        ) from None
    if out.returncode != 0:
        why = (out.stderr.strip() or f"exit code {out.returncode}").splitlines()[-1]
        raise ConfigError(f"sinfo could not reach the cluster: {why}")
    cpus_of = {}
    for line in out.stdout.splitlines():
        name, _, count = line.partition(" ")
        if count.strip().isdigit():
            cpus_of[name] = int(count)
    if nodes > len(cpus_of):
        raise ConfigError(
            f"--nodes {nodes} is more than the {len(cpus_of)} node(s) the cluster has "
            f"(sinfo: {', '.join(sorted(cpus_of)) or 'none'}): SLURM could never start it"
        )
    most = max(cpus_of.values(), default=0)
    if cpus > most:
        raise ConfigError(
            f"{cpus} CPUs a node (--cpus-per-task, or distributed.nproc x threads) is "
            f"more than the {most} the largest node has (sinfo): SLURM could never "
            "start it"
        )


def submit(
    source: RunConfig,
    run_dir: str | Path | None = None,
    *,
    nodes: int | None = None,
    time_limit: str = "00:30:00",
    cpus_per_task: int | None = None,
    port: int = 29500,
    prefix: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> Job:
    """Claim a run folder, write its batch file there and submit it with sbatch; the job id is
    recorded in the folder. `nodes`: SLURM nodes, by default the config's distributed.nnodes; the
    folder's config records them, with the job's first node as the rendezvous. A job sbatch
    refuses is a ConfigError with SLURM's one line."""
    cfg = require_config(source)
    nodes = cfg.distributed.nnodes if nodes is None else nodes
    if nodes < 1:
        raise ConfigError(f"nodes must be >= 1, got {nodes}")
    if prefix is None and env is None:  # the cluster a notebook's find_cluster finds, by one rule
        access, why = find_cluster()
        if access is None:
            raise ConfigError(why)
        prefix, env = access.prefix, access.env
    check_submittable(
        cfg, nodes, time_limit, cpus_per_task or _node_cpus(cfg), prefix or [], {**os.environ, **(env or {})}
    )
    if nodes > 1:  # SLURM picks the nodes: the rendezvous is on whichever comes first
        cfg = cfg.replace(
            **{
                "distributed.nnodes": nodes,
                "distributed.node_rank": 0,
                "distributed.rdzv_endpoint": f"$head_addr:{port}",
            }
        )
    run_dir = create_run_dir(cfg, path=run_dir) if run_dir is not None else create_run_dir(cfg)
    run_dir = Path(run_dir).resolve()  # sbatch runs in the folder: a relative path would miss it
    folder = RunFolder(run_dir)
    folder.job_file.write_text(job_script(cfg, run_dir, nodes, port, time_limit, cpus_per_task))
    env_all = {**os.environ, **(env or {})}
    out = subprocess.run(
        [*(prefix or []), "sbatch", "--parsable", str(folder.job_file)],
        capture_output=True,
        text=True,
        env=env_all,
        cwd=run_dir,
        timeout=60,
    )
    job_id = out.stdout.strip().split(";")[0]
    if out.returncode != 0 or not job_id.isdigit():
        why = (out.stderr.strip() or out.stdout.strip() or f"exit code {out.returncode}").splitlines()
        folder.write_summary(
            {
                "status": "failed",
                "cause": "submit",
                "error_type": error_type_of("submit"),
                "message": f"sbatch refused the job: {why[-1]}",
                FINAL_KEY: out.returncode,
            }
        )
        raise ConfigError(f"sbatch refused the job: {why[-1]}")
    folder.write_job(
        {
            "job_id": job_id,
            "submitted_t": round(time.time(), 4),
            "nodes": nodes,
            "job_file": folder.job_file.name,
        }
    )
    return Job(run_dir, prefix, env_all)


def reconcile(root: str | Path) -> list[Path]:
    """Submitted runs under `root` whose job has ended while nobody followed it (a submit without
    --wait, a closed laptop): their final summary, with SLURM's state and the ranks' cause, written
    now, as `workbench submit RUN_DIR --wait` would. Runs whose summary has SLURM's word already, a
    cluster that cannot be reached, or a job SLURM has forgotten are left as they are. Returns the
    folders it finished."""
    pending = [
        p
        for p in sorted(Path(root).glob("*"))
        if RunFolder(p).job() is not None and "slurm" not in (RunFolder(p).summary() or {})
    ]
    if not pending:
        return []
    access, _ = find_cluster()
    if access is None:
        return []
    done = []
    for run_dir in pending:
        try:
            job = Job(run_dir, access.prefix, access.env)
            state = job.state()
            if state.ended:
                job.finish(state)
                done.append(run_dir)
        except (ConfigError, OSError, subprocess.TimeoutExpired):
            continue  # forgotten by SLURM, or a damaged record: the folder says what it can
    return done
