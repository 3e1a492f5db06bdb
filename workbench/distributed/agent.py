"""torchrun with its rendezvous store bound to 127.0.0.1: the torchrun agent of a single-node run.

    python -m workbench.loopback --nnodes=1 --nproc-per-node=2 --rdzv-backend=c10d \
        --rdzv-endpoint=127.0.0.1:29500 --local-addr 127.0.0.1 -m workbench.worker --config ...

torch's TCPStore server listens on every interface whatever host it is given, so a plain
`torchrun --standalone` exposes its rendezvous store to the network. A TCPStore can instead adopt a
socket that is already listening (`master_listen_fd`): this module pre-creates the rendezvous store
on a socket bound to the endpoint's loopback address, and torchrun's own store, created
multi-tenant on the same port in the same process, reuses it (the ranks do the same for their
process-group store: workbench.train.rank). Everything else is `torch.distributed.run` unchanged,
with the same arguments. An exported script carries a copy of this file's functions.
"""
from __future__ import annotations

import sys
from datetime import timedelta

import torch.distributed as dist
from torch.distributed.run import main as torchrun_main

from ..net import is_loopback, listen_fd


def rendezvous_endpoint(argv: list[str]) -> tuple[str, int] | None:
    """(host, port) of --rdzv-endpoint in a torchrun argument list, or None."""
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--rdzv-endpoint=") else (
            argv[i + 1] if arg == "--rdzv-endpoint" and i + 1 < len(argv) else None)
        if value:
            host, _, port = value.rpartition(":")
            return host.strip("[]"), int(port)
    return None


def run_torchrun(argv: list[str]) -> int:
    """torch.distributed.run's main with the rendezvous store pre-bound to a loopback endpoint."""
    endpoint = rendezvous_endpoint(argv)
    store = None
    if endpoint and is_loopback(endpoint[0]):
        host, port = endpoint
        try:
            fd = listen_fd(host, port)
        except OSError:  # another node on this machine hosts it: torchrun connects as a client
            fd = None
        if fd is not None:
            store = dist.TCPStore(host, port, is_master=True, multi_tenant=True, master_listen_fd=fd,
                                  wait_for_workers=False, timeout=timedelta(seconds=60))
    try:
        torchrun_main(argv)
    finally:
        del store
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_torchrun(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
