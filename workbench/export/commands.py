"""The exact commands that run an exported script: one process, torchrun on one node, torchrun on
several nodes, and a SLURM batch file that starts the multi-node command with srun.

Every function returns plain text or a list of arguments, so tests can run the very same command.
"""
from __future__ import annotations

import shlex

from ..config import RunConfig

DEFAULT_PORT = 29500


def single_node(cfg: RunConfig, script: str = "train.py", port: int = DEFAULT_PORT,
                launcher: list[str] | None = None) -> list[str]:
    """One node: plain python for one rank, else torchrun with its rendezvous on loopback only."""
    nproc = cfg.distributed.nproc
    if nproc == 1:
        return ["python", script]
    return [*(launcher or ["torchrun"]), "--nnodes=1", f"--nproc-per-node={nproc}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--local-addr", "127.0.0.1",
            script]


def multi_node(cfg: RunConfig, nodes: int, head: str = "HEAD_NODE", port: int = DEFAULT_PORT,
               script: str = "train.py", job_id: str = "workbench",
               launcher: list[str] | None = None) -> list[str]:
    """The command to start on every node; c10d rendezvous on the head node assigns node ranks."""
    return [*(launcher or ["torchrun"]), f"--nnodes={nodes}",
            f"--nproc-per-node={cfg.distributed.nproc}", f"--rdzv-id={job_id}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={head}:{port}", f"--max-restarts={cfg.distributed.max_restarts}", script]


def default_nodes(cfg: RunConfig) -> int:
    """A multi-node command needs at least two nodes; a single-node run is shown on two."""
    return max(cfg.distributed.nnodes, 2)


def uses_gpu(cfg: RunConfig) -> bool:
    return cfg.run.device in ("cuda", "auto")


def slurm_job(cfg: RunConfig, nodes: int, port: int = DEFAULT_PORT, script: str = "train.py",
              time_limit: str = "00:30:00", job_name: str | None = None) -> str:
    """A batch file: one task per node, each running torchrun; the rendezvous is on the first node."""
    nproc = cfg.distributed.nproc
    name = job_name or f"workbench-{cfg.run.label or cfg.model.name.rpartition(':')[2]}"
    gpu = (f"#SBATCH --gpus-per-node={nproc}" if uses_gpu(cfg)
           else "# (CPU run: no GPUs requested; torchrun uses the gloo backend)")
    torchrun = multi_node(cfg, nodes, head="$head_node", port=port, script=script,
                          job_id="$SLURM_JOB_ID")
    torchrun[1] = "--nnodes=$SLURM_NNODES"
    line = " ".join(shell_word(a) for a in torchrun)
    return f"""#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task={max(2, 4 * nproc)}
{gpu}
#SBATCH --time={time_limit}
#SBATCH --output=%x-%j.out
# Submit from the export folder: sbatch job.slurm
# srun starts one torchrun per node; torchrun starts {nproc} rank(s) per node; the c10d rendezvous
# runs on the first node of the allocation, which also numbers the nodes.
set -euo pipefail
cd "${{SLURM_SUBMIT_DIR:-.}}"
# sed reads every name: with pipefail, `head -n 1` can end the job through scontrol's SIGPIPE.
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)
echo "rendezvous on $head_node:{port}, $SLURM_NNODES node(s) x {nproc} rank(s)"
srun --kill-on-bad-exit=1 {line}
"""


def shell_word(arg: str) -> str:
    """Quote an argument, leaving $VARIABLES in it to the shell: --x="$VAR:1" ."""
    if "$" not in arg:
        return shlex.quote(arg)
    flag, eq, value = arg.partition("=")
    return f'{flag}="{value}"' if eq else f'"{arg}"'


def commands_markdown(cfg: RunConfig, nodes: int, port: int = DEFAULT_PORT) -> str:
    """commands.md: what to type, on one machine, on several, and under SLURM."""
    d = cfg.distributed
    one = shlex.join(single_node(cfg, port=port))
    many = shlex.join(multi_node(cfg, nodes, port=port))
    world = d.nproc * nodes
    batch = cfg.loader.batch_size * cfg.optim.grad_accum_steps
    return f"""# Running this export

`train.py` depends only on torch. Settings: `config.json` (also embedded in the script). From this
folder:

## This machine ({d.nproc} rank(s), as the run was)

```bash
{one}
```

## {nodes} nodes, {d.nproc} rank(s) each ({world} ranks)

Run on every node, with HEAD_NODE the hostname or address of one of them (it hosts the
rendezvous, port {port} must be open between the nodes); the rendezvous numbers the nodes.

```bash
{many}
```

Each rank keeps its batch of {batch} samples (`loader.batch_size` x `optim.grad_accum_steps`), so the
global batch grows from {batch * d.world_size} to {batch * world}; scale `optim.lr` if you need the same
training dynamics.

torchrun gives each rank one CPU thread (OMP_NUM_THREADS=1) unless you set OMP_NUM_THREADS
yourself; plain `python train.py` uses every core. On CPU nodes, set it to the cores per rank.

## SLURM

```bash
sbatch job.slurm
```

## The same run in the workbench

```bash
workbench run --config config.json
```
"""
