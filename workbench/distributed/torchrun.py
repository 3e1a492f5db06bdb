"""The one builder of torchrun command lines: the launcher's, the cluster's SLURM job, the export's
commands and the all-reduce benchmark all call `torchrun_args`, so the flags cannot drift apart.

    torchrun_args(["-m", "workbench.worker", "--config", "RUN/config.json"], nproc=2,
                  endpoint="127.0.0.1:29500", node_rank=0, max_restarts=0)

An endpoint on loopback gets `--local-addr 127.0.0.1`; run through `LOOPBACK_RUNNER` (the
workbench's torchrun agent) its rendezvous store also listens on 127.0.0.1 only. A run across
machines started by the launcher gets this machine's address on the route to the endpoint as its
`--local-addr` and that interface as GLOO_SOCKET_IFNAME, and the node that holds the endpoint's
address hosts the rendezvous (`--rdzv-conf=is_host=1`): where the host name resolves to 127.0.0.1
(common in containers), torchrun would not know the endpoint for its own, and torchrun and gloo
would tell the other machines to reach this one on loopback.
"""

from __future__ import annotations

import os
import sys

from ..net import LOOPBACK, free_port, ipv4_of, is_loopback, loopback_ifname, route_to

# Restarts (--max-restarts) come up reliably only when each attempt gets a fresh store.
RESTART_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
# RESTART_ENV as the words of an `env` command, in front of a torchrun command line
RESTART_ENV_WORDS = ["env", *(f"{k}={v}" for k, v in RESTART_ENV.items())]
TORCHRUN = ["torchrun"]  # what a person types
PYTHON_TORCHRUN = ["python", "-m", "torch.distributed.run"]  # the same, where torchrun is not on PATH
WORKER = ["-m", "workbench.worker"]


def loopback_runner() -> list[str]:
    """This interpreter running torchrun with its rendezvous store bound to the endpoint's address
    (127.0.0.1, or this node's address toward the others: workbench.distributed.agent)."""
    return [sys.executable, "-m", "workbench.loopback"]


def toward(host: str) -> tuple[str | None, str | None, bool]:
    """How this node reaches the rendezvous host: its own address on the route there, that
    address's interface (for GLOO_SOCKET_IFNAME, None when no interface holds it), and whether this
    node holds the host's address (then it serves the rendezvous). (None, None, False) when the
    host cannot be resolved or reached."""
    route = route_to(host)
    if route is None:
        return None, None, False
    return route[0], route[1], route[0] == ipv4_of(host)


def torchrun_args(
    program: list[str],
    *,
    nproc: int,
    endpoint: str,
    nnodes: int | str = 1,
    node_rank: int | str | None = None,
    rdzv_id: str | None = None,
    max_restarts: int | None = None,
    log_dir: str | None = None,
    runner: list[str] = TORCHRUN,
    local_addr: str | None = None,
    hosts_rendezvous: bool = False,
) -> list[str]:
    """`runner` + torchrun flags + `program` (a script, or -m module and its arguments).

    Values may be shell variables ("$SLURM_NODEID") where a batch file fills them in. Flags left
    None are left to torchrun: no --node-rank lets the c10d rendezvous number the nodes."""
    args = [*runner, f"--nnodes={nnodes}", f"--nproc-per-node={nproc}"]
    if node_rank is not None:
        args.append(f"--node-rank={node_rank}")
    if rdzv_id is not None:
        args.append(f"--rdzv-id={rdzv_id}")
    args += ["--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}"]
    if is_loopback(endpoint.rpartition(":")[0]):  # every node on this machine: stay on loopback
        args += ["--local-addr", LOOPBACK]
    elif local_addr is not None:  # this machine's address toward the others
        args += ["--local-addr", local_addr]
    if hosts_rendezvous:  # this node holds the endpoint's address: it serves the rendezvous store
        args.append("--rdzv-conf=is_host=1")
    if max_restarts is not None:
        args.append(f"--max-restarts={max_restarts}")
    if log_dir is not None:
        args.append(f"--log-dir={log_dir}")
    return args + list(program)


def rank_command(d, program: list[str], log_dir: str) -> list[str]:
    """How the ranks of a run with distributed settings `d` start: this interpreter running
    `program` for one process; else torchrun (the loopback agent when every node is on this
    machine, on a free port for one node) with torchrun's logs in `log_dir`."""
    if d.world_size == 1:
        return [sys.executable, *program]
    endpoint = f"{LOOPBACK}:{free_port()}" if d.nnodes == 1 else d.rdzv_endpoint
    local = is_loopback(endpoint.rpartition(":")[0])  # one node, or nodes simulated on this machine
    env = loopback_env() if local else dict(RESTART_ENV)
    address, interface, holds = (None, None, False) if local else toward(endpoint.rpartition(":")[0])
    if interface is not None and "GLOO_SOCKET_IFNAME" not in os.environ:
        env["GLOO_SOCKET_IFNAME"] = interface  # the user's own setting wins
    return [
        "env",
        *(f"{k}={v}" for k, v in env.items()),
        *torchrun_args(
            program,
            nproc=d.nproc,
            nnodes=d.nnodes,
            node_rank=d.node_rank,
            endpoint=endpoint,
            max_restarts=d.max_restarts,
            log_dir=log_dir,
            runner=loopback_runner(),
            local_addr=address,
            hosts_rendezvous=holds and d.node_rank in (0, None),
        ),
    ]


def loopback_env() -> dict[str, str]:
    """Environment for a run whose every rank is on this machine: gloo on the loopback device."""
    return {**RESTART_ENV, "GLOO_SOCKET_IFNAME": loopback_ifname()}
