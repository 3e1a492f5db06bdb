"""torchrun with its rendezvous store bound to the endpoint's address only: the workbench's torchrun
agent, on one node or on each node of a run across machines.

    python -m workbench.loopback --nnodes=1 --nproc-per-node=2 --rdzv-backend=c10d \
        --rdzv-endpoint=127.0.0.1:29500 --local-addr 127.0.0.1 -m workbench.worker --config ...
    python -m workbench.loopback --nnodes=2 --node-rank=$SLURM_NODEID \
        --rdzv-endpoint=$head_addr:29500 ... -m workbench.worker --config ...   # each node of a job

torch's TCPStore server listens on every interface whatever host it is given, so a plain
`torchrun --standalone` exposes its rendezvous store to the network. A TCPStore can instead adopt a
socket that is already listening (`master_listen_fd`): this module pre-creates the rendezvous store
on a socket bound to the endpoint's address (loopback, or the head node's address on its link to
the others), and torchrun's own store, created multi-tenant on the same port in the same process,
reuses it (the ranks do the same for their process-group store: workbench.train.rank).

Across machines each node works out at start what a launcher on it would have been told
(workbench.distributed.torchrun.toward): its address on the route to the endpoint (--local-addr,
which the ranks' MASTER_ADDR becomes), that interface for gloo (GLOO_SOCKET_IFNAME), and whether it
holds the endpoint's address and so serves the rendezvous (--rdzv-conf=is_host=1). A SLURM job's
nodes all run one command, so only they can know this. Flags and settings already given are kept.
Everything else is `torch.distributed.run` unchanged, with the same arguments.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import torch.distributed as dist
from torch.distributed.run import main as torchrun_main

from ..net import is_loopback, listen_fd
from .torchrun import toward


def rendezvous_endpoint(argv: list[str]) -> tuple[str, int] | None:
    """(host, port) of --rdzv-endpoint in a torchrun argument list, or None."""
    for i, arg in enumerate(argv):
        value = (
            arg.split("=", 1)[1]
            if arg.startswith("--rdzv-endpoint=")
            else (argv[i + 1] if arg == "--rdzv-endpoint" and i + 1 < len(argv) else None)
        )
        if value:
            host, _, port = value.rpartition(":")
            return host.strip("[]"), int(port)
    return None


def _given(argv: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def across_machines(argv: list[str], host: str) -> tuple[list[str], str | None]:
    """argv with this node's address toward the rendezvous `host` and, where this node holds that
    address, the flag that makes it serve the rendezvous; GLOO_SOCKET_IFNAME set for the ranks.
    Returns the arguments and the address to serve the store on (None: another node serves it)."""
    address, interface, holds = toward(host)
    if address is None:  # unreachable: torchrun says so in its own words
        return argv, None
    extra = [] if _given(argv, "--local-addr") else ["--local-addr", address]
    if holds and not _given(argv, "--rdzv-conf"):
        extra.append("--rdzv-conf=is_host=1")
    if interface is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)  # the user's own setting wins
    return extra + argv, address if holds else None


def run_torchrun(argv: list[str]) -> int:
    """torch.distributed.run's main with the rendezvous store pre-bound to the endpoint's address."""
    host, port = rendezvous_endpoint(argv) or (None, 0)
    if host is not None and not is_loopback(host):
        argv, host = across_machines(argv, host)
    store = None
    if host is not None:
        try:
            fd = listen_fd(host, port)
        except OSError:  # another node on this machine hosts it: torchrun connects as a client
            fd = None
        if fd is not None:
            store = dist.TCPStore(
                host,
                port,
                is_master=True,
                multi_tenant=True,
                master_listen_fd=fd,
                wait_for_workers=False,
                timeout=timedelta(seconds=60),
            )
    try:
        torchrun_main(argv)
    finally:
        del store
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_torchrun(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
