"""Take a run to a cluster: the torchrun command for each node, and a SLURM batch file that runs
the workbench worker on every node.

    python -m workbench.distributed.cluster --config my_config.json --nodes 2 --gpus-per-node 8 > job.slurm

The worker is the same module the notebook runs; only the launch differs. On a cluster the
rendezvous endpoint is node 0's address (SLURM names it), every node runs the same command with
its own --node-rank, and the backend is nccl on GPUs.
"""
from __future__ import annotations

import argparse
import shlex
import sys

from ..config import RunConfig
from ..runfolder import RunFolder
from .slurm import per_node, slurm_job
from .torchrun import PYTHON_TORCHRUN, RESTART_ENV_WORDS, WORKER, torchrun_args


def cluster_config(cfg: RunConfig, nodes: int, gpus_per_node: int, endpoint: str) -> RunConfig:
    return cfg.replace(**{"distributed.nnodes": nodes, "distributed.nproc": gpus_per_node,
                          "distributed.rdzv_endpoint": endpoint, "distributed.node_rank": 0,
                          "run.device": "cuda" if gpus_per_node else cfg.run.device})


def node_command(cfg: RunConfig, node_rank: int, run_dir: str = "runs/cluster-job") -> str:
    """The line to run on node `node_rank` (the same on every node but for --node-rank)."""
    d, folder = cfg.distributed, RunFolder(run_dir)
    return shlex.join([*RESTART_ENV_WORDS, *torchrun_args(
        [*WORKER, "--config", str(folder.config_file)], nproc=d.nproc, nnodes=d.nnodes,
        node_rank=node_rank, endpoint=d.rdzv_endpoint, max_restarts=d.max_restarts,
        log_dir=str(folder.torchrun_logs), runner=PYTHON_TORCHRUN)])


def slurm_script(cfg: RunConfig, nodes: int = 2, gpus_per_node: int = 8, port: int = 29400,
                 run_dir: str = "runs/$SLURM_JOB_ID", time: str = "01:00:00", cpus: int = 16) -> str:
    """A batch file: config.json written next to the events, one torchrun per node via srun."""
    c = cluster_config(cfg, nodes, gpus_per_node, f"head:{port}")
    folder = RunFolder("$RUN_DIR")  # the job's shell names the folder
    line = torchrun_args([*WORKER, "--config", str(folder.config_file)], nproc=gpus_per_node,
                         nnodes="$SLURM_NNODES", node_rank="$SLURM_NODEID",
                         endpoint=f"$head_node:{port}", max_restarts=c.distributed.max_restarts,
                         log_dir=f"{folder.torchrun_logs}_node$SLURM_NODEID", runner=PYTHON_TORCHRUN)
    setup = (f'export RUN_DIR={run_dir}\nmkdir -p "$RUN_DIR"\n'
             f"cat > \"{folder.config_file}\" <<'JSON'\n{c.to_json()}\nJSON")
    return slurm_job(per_node(line), name=c.run.label or "workbench", nodes=nodes,
                     nproc=gpus_per_node, gpus=gpus_per_node > 0, port=port, cpus_per_task=cpus,
                     time_limit=time, setup=setup)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.distributed.cluster", description=__doc__,
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
