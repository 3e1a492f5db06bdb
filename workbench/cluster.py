"""Take a run to a cluster: the torchrun command for each node, and a SLURM batch file that runs it.

    python -m workbench.cluster --config my_config.json --nodes 2 --gpus-per-node 8 > job.sbatch

The worker is the same module the notebook runs; only the launch differs. On a cluster the
rendezvous endpoint is node 0's address (SLURM names it), every node runs the same command with
its own --node-rank, and the backend is nccl on GPUs.
"""
from __future__ import annotations

import argparse
import shlex
import sys

from .config import RunConfig

SLURM = """#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={gpus}
#SBATCH --cpus-per-task={cpus}
#SBATCH --time={time}
# One torchrun per node; torchrun starts {gpus} rank(s) on each. Submit with: sbatch job.sbatch
set -euo pipefail
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)  # head -n 1 + pipefail: SIGPIPE
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1  # restarts come up reliably
RUN_DIR={run_dir}
mkdir -p "$RUN_DIR"
cat > "$RUN_DIR/config.json" <<'JSON'
{config}
JSON
srun bash -c 'python -m torch.distributed.run --nnodes={nodes} --nproc-per-node={gpus} \\
    --node-rank=$SLURM_NODEID --rdzv-backend=c10d --rdzv-endpoint='"$head"':{port} \\
    --max-restarts={restarts} --log-dir='"$RUN_DIR"'/torchrun_logs_node$SLURM_NODEID \\
    -m workbench.worker --config '"$RUN_DIR"'/config.json'
"""


def cluster_config(cfg: RunConfig, nodes: int, gpus_per_node: int, endpoint: str) -> RunConfig:
    return cfg.replace(**{"distributed.nnodes": nodes, "distributed.nproc": gpus_per_node,
                          "distributed.rdzv_endpoint": endpoint, "distributed.node_rank": 0,
                          "run.device": "cuda" if gpus_per_node else cfg.run.device})


def node_command(cfg: RunConfig, node_rank: int, run_dir: str = "runs/cluster-job") -> str:
    """The line to run on node `node_rank` (the same on every node but for --node-rank)."""
    d = cfg.distributed
    return shlex.join([
        "env", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1", "python", "-m", "torch.distributed.run",
        f"--nnodes={d.nnodes}", f"--nproc-per-node={d.nproc}", f"--node-rank={node_rank}",
        "--rdzv-backend=c10d", f"--rdzv-endpoint={d.rdzv_endpoint}",
        f"--max-restarts={d.max_restarts}", f"--log-dir={run_dir}/torchrun_logs",
        "-m", "workbench.worker", "--config", f"{run_dir}/config.json"])


def slurm_script(cfg: RunConfig, nodes: int = 2, gpus_per_node: int = 8, port: int = 29400,
                 run_dir: str = "runs/$SLURM_JOB_ID", time: str = "01:00:00", cpus: int = 16) -> str:
    """A batch file: config.json written next to the events, one torchrun per node via srun."""
    c = cluster_config(cfg, nodes, gpus_per_node, f"head:{port}")
    return SLURM.format(name=c.run.label or "workbench", nodes=nodes, gpus=gpus_per_node, cpus=cpus,
                        time=time, run_dir=run_dir, config=c.to_json(), port=port,
                        restarts=c.distributed.max_restarts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.cluster", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="a RunConfig JSON file (default: the default preset)")
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--port", type=int, default=29400)
    args = p.parse_args(argv)
    cfg = RunConfig.load(args.config) if args.config else RunConfig.default()
    print(slurm_script(cfg, args.nodes, args.gpus_per_node, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
