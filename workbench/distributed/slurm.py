"""The one SLURM batch file: one task per node, each starting torchrun; the c10d rendezvous on the
allocation's first node. The cluster job (the workbench worker) and the export (a standalone
train.py) both fill in this template with a torchrun line from workbench.distributed.torchrun.

    slurm_job(line, name="my-run", nodes=2, nproc=8, gpus=True, port=29500)
"""

from __future__ import annotations

import shlex

from .torchrun import RESTART_ENV


def shell_word(arg: str) -> str:
    """Quote an argument, leaving $VARIABLES in it to the shell: --x="$VAR:1" ."""
    if "$" not in arg:
        return shlex.quote(arg)
    flag, eq, value = arg.partition("=")
    return f'{flag}="{value}"' if eq else f'"{arg}"'


def per_node(args: list[str]) -> str:
    """A command whose $VARIABLES each node's task must fill in itself ($SLURM_NODEID): run
    through `bash -c` inside the task, not expanded by the batch script."""
    return "bash -c " + shlex.quote(" ".join(args))


def slurm_job(
    line: str,
    *,
    name: str,
    nodes: int,
    nproc: int,
    gpus: bool,
    port: int,
    cpus_per_task: int | None = None,
    time_limit: str = "01:00:00",
    setup: str = "",
    submit: str = "Submit with: sbatch job.slurm",
    output: str = "%x-%j.out",
    requeue: bool | None = None,
    ended: str = "",
) -> str:
    """The batch file. `line` is what srun starts on every node (it may use $head_node, the first
    node's name, or $head_addr, its address); `setup` is shell run once before it (writing a
    config file, say). `requeue`: True for a job that saves resumable state (SLURM runs it again
    after a node failure or preemption and it goes on from its last saved step), False for one
    that would start over; None leaves it to the cluster's default. `ended`: a command the job runs
    as it ends, with srun's exit code or TERM (SLURM cancelled it or its time ran out: the steps
    are let end first, within SLURM's KillWait), so the job records its own end."""
    gpu = (
        f"#SBATCH --gpus-per-node={nproc}"
        if gpus
        else "# (CPU run: no GPUs requested; torchrun uses the gloo backend)"
    )
    again = {
        True: "#SBATCH --requeue\n# (requeued, the run resumes from its last saved step)\n",
        False: "#SBATCH --no-requeue\n# (it saves no resumable state: requeued, it would start over)\n",
        None: "",
    }[requeue]
    env = "\n".join(f"export {k}={v}" for k, v in RESTART_ENV.items())
    return f"""#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task={cpus_per_task or max(2, 4 * nproc)}
{gpu}
#SBATCH --time={time_limit}
#SBATCH --output={output}
{again}# {submit}
# srun starts one torchrun per node; torchrun starts {nproc} rank(s) per node; the c10d rendezvous
# runs on the first node of the allocation, which also numbers the nodes.
set -euo pipefail
cd "${{SLURM_SUBMIT_DIR:-.}}"
# sed reads every name: with pipefail, `head -n 1` can end the job through scontrol's SIGPIPE.
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)
# its address as SLURM reaches it (NodeAddr): a node's name need not resolve on the others
head_addr=$(scontrol show node -o "$head_node" | sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p')
head_addr=${{head_addr:-$head_node}}
export head_node head_addr
{env}  # restarts come up reliably only with a fresh store per attempt
{setup.strip()}
echo "rendezvous on $head_addr:{port} ($head_node), $SLURM_NNODES node(s) x {nproc} rank(s)"
{_run(line, ended)}"""


def _run(line: str, ended: str) -> str:
    """The job's last lines: srun, and the command that records how it ended when there is one."""
    srun = f"srun --kill-on-bad-exit=1 {line}"
    if not ended:
        return srun + "\n"
    return f"""set +e  # from here the job records its own end, whatever srun returns
record_end() {{ {ended} "$1"; }}
srun_pid=""
trap '[ -n "$srun_pid" ] && wait "$srun_pid"; record_end TERM; exit 143' TERM
{srun} &
srun_pid=$!
wait "$srun_pid"
code=$?
trap - TERM
record_end "$code"
exit "$code"
"""
