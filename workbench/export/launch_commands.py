"""The exact commands that run an exported script: one process, torchrun on one node, torchrun on
several nodes, and a SLURM batch file that starts the multi-node command with srun.

Every function returns plain text or a list of arguments, so tests can run the very same command.
"""

from __future__ import annotations

import shlex

from ..config import RunConfig
from ..machine.allocator import rule_text as allocator_rule
from ..machine.threads import THREADS_ENV, rule_text as thread_rule
from ..distributed.slurm import shell_word, slurm_job as slurm_template
from ..distributed.torchrun import RESTART_ENV_WORDS, TORCHRUN, torchrun_args
from ..net import LOOPBACK

DEFAULT_PORT = 29500


def single_node(
    cfg: RunConfig, script: str = "train.py", port: int = DEFAULT_PORT, launcher: list[str] | None = None
) -> list[str]:
    """One node: plain python for one rank, else torchrun with its rendezvous on loopback only."""
    nproc = cfg.distributed.nproc
    if nproc == 1:
        return ["python", script]
    return restartable(
        cfg,
        torchrun_args(
            [script],
            nproc=nproc,
            endpoint=f"{LOOPBACK}:{port}",
            max_restarts=cfg.distributed.max_restarts or None,
            runner=launcher or TORCHRUN,
        ),
    )


def multi_node(
    cfg: RunConfig,
    nodes: int,
    head: str = "HEAD_NODE",
    port: int = DEFAULT_PORT,
    script: str = "train.py",
    job_id: str = "workbench",
    launcher: list[str] | None = None,
) -> list[str]:
    """The command to start on every node; c10d rendezvous on the head node assigns node ranks."""
    return restartable(
        cfg,
        torchrun_args(
            [script],
            nproc=cfg.distributed.nproc,
            nnodes=nodes,
            rdzv_id=job_id,
            endpoint=f"{head}:{port}",
            max_restarts=cfg.distributed.max_restarts or None,
            runner=launcher or TORCHRUN,
        ),
    )


def restartable(cfg: RunConfig, command: list[str]) -> list[str]:
    """A torchrun command that restarts (distributed.max_restarts) gets the environment the
    workbench's own launch uses for it: without it a restarted group can fail to connect."""
    if not cfg.distributed.max_restarts:
        return command
    return [*RESTART_ENV_WORDS, *command]


def default_nodes(cfg: RunConfig) -> int:
    """A multi-node command needs at least two nodes; a single-node run is shown on two."""
    return max(cfg.distributed.nnodes, 2)


def uses_gpu(cfg: RunConfig) -> bool:
    return cfg.run.device in ("cuda", "auto")


# What srun runs on each node of the exported job before torchrun, as the workbench's own agent
# works it out (workbench.distributed.agent): the node's address on the route to the head, which
# torchrun hands the others (--local-addr), that address's interface for gloo (yours wins), and on
# the node that holds the head's address the flag that makes it serve the rendezvous. Where a host
# name resolves to 127.0.0.1 (common in containers) torchrun and gloo would otherwise send the other
# nodes to loopback. With every node on loopback, or no `ip`, torchrun's own choice stands.
ON_NODE = r"""on_node() {{
  local head_ip addr ifname flags=()
  head_ip=$(getent ahostsv4 "$head_addr" | sed -n '1s/ .*//p')
  addr=$(ip -o route get "$head_ip" 2>/dev/null | sed -n 's/.* src \([^ ]*\).*/\1/p')
  case "$addr" in
    ""|127.*) ;;
    *) flags=(--local-addr "$addr")
       if [ "$addr" = "$head_ip" ]; then flags+=(--rdzv-conf=is_host=1); fi
       ifname=$(ip -o -4 addr show to "$addr" | awk '{{print $2; exit}}')
       if [ -n "$ifname" ]; then export GLOO_SOCKET_IFNAME="${{GLOO_SOCKET_IFNAME:-$ifname}}"; fi ;;
  esac
  exec {torchrun} "${{flags[@]}}" {script} "$@"
}}
export -f on_node"""


def slurm_job(
    cfg: RunConfig,
    nodes: int,
    port: int = DEFAULT_PORT,
    script: str = "train.py",
    time_limit: str = "00:30:00",
    job_name: str | None = None,
) -> str:
    """job.slurm: one task per node, each running torchrun on the script, with the rendezvous on
    the head node's address (its NodeAddr: a node's name need not resolve on the others). Options
    after `sbatch job.slurm` go to the script."""
    name = job_name or f"workbench-{cfg.run.label or cfg.model.name.rpartition(':')[2]}"
    torchrun = multi_node(
        cfg, "$SLURM_NNODES", head="$head_addr", port=port, script=script, job_id="$SLURM_JOB_ID"
    )[:-1]
    on_node = ON_NODE.format(torchrun=" ".join(shell_word(a) for a in torchrun), script=shlex.quote(script))
    return slurm_template(
        "bash -c 'on_node \"$@\"' on_node \"$@\"",
        name=name,
        nodes=nodes,
        nproc=cfg.distributed.nproc,
        gpus=uses_gpu(cfg),
        port=port,
        time_limit=time_limit,
        setup=on_node,
        submit="Submit from the export folder: sbatch job.slurm [train.py options]",
        # the script resumes a requeued job from its state, but not under FSDP
        requeue=cfg.run.save_every > 0 and cfg.distributed.strategy != "fsdp",
    )


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

## Threads and memory allocator

{thread_rule(cfg)} To choose yourself: `{THREADS_ENV}=N python train.py`, or `"threads"` under
`"run"` in the CONFIG at the top of `train.py`.

{allocator_rule(cfg.run.allocator)} To choose yourself: `"allocator"` under `"run"` in that CONFIG.

## SLURM

```bash
sbatch job.slurm                      # options after it go to train.py: --steps 100 --metrics m
```

Each node works out its own address toward the first node (the rendezvous) and gloo's interface
before torchrun starts (`ip route get`); set GLOO_SOCKET_IFNAME yourself to choose another.

## Serving the trained model

`train.py` writes `out/model.pt`; `serve.py` serves it over HTTP on 127.0.0.1 (it needs fastapi and
uvicorn besides torch), with the workbench server's request checks and dynamic batching:

```bash
python serve.py --max-batch 8 --max-wait-ms 5     # POST /predict {{"inputs": [...]}}, GET /health
```

## The same run in the workbench

```bash
workbench run --config config.json
```
"""
