"""Keep a single-node run's sockets on 127.0.0.1.

    python -m workbench.loopback --nnodes=1 --nproc-per-node=2 --rdzv-backend=c10d \
        --rdzv-endpoint=127.0.0.1:29500 --local-addr 127.0.0.1 -m workbench.worker --config ...

torch's TCPStore server listens on every interface whatever host it is given, so a plain
`torchrun --standalone` exposes its rendezvous store (and rank 0's process-group store) to the
network. A TCPStore can instead adopt a socket that is already listening (`master_listen_fd`):
- this module is torchrun with its rendezvous store pre-created on a socket bound to the
  endpoint's loopback address; torchrun's own store, created multi-tenant on the same port in the
  same process, reuses it;
- `process_group_store` does the same for the store rank 0 hosts for the process group.
Everything else is `torch.distributed.run` unchanged, with the same arguments.
"""
from __future__ import annotations

import os
import socket
import sys
from datetime import timedelta

from .launch import is_loopback


def listen_fd(host: str, port: int) -> int:
    """A listening socket on exactly host:port, handed over as a bare fd (the store closes it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(512)
    return sock.detach()


def process_group_store(rank: int, world_size: int, timeout_s: float):
    """A store for init_process_group bound to loopback, or None when the run is not on loopback
    (several machines) or torchrun shares its own store with the ranks."""
    host, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    if not port or not is_loopback(host) or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return None
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    if rank == 0:
        return dist.TCPStore(host, int(port), world_size, is_master=True, timeout=timeout,
                             master_listen_fd=listen_fd(host, int(port)), wait_for_workers=False)
    return dist.TCPStore(host, int(port), world_size, is_master=False, timeout=timeout)


def _endpoint(argv: list[str]) -> tuple[str, int] | None:
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--rdzv-endpoint=") else (
            argv[i + 1] if arg == "--rdzv-endpoint" and i + 1 < len(argv) else None)
        if value:
            host, _, port = value.rpartition(":")
            return host.strip("[]"), int(port)
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    endpoint = _endpoint(argv)
    store = None
    if endpoint and is_loopback(endpoint[0]):
        import torch.distributed as dist

        host, port = endpoint
        try:
            fd = listen_fd(host, port)
        except OSError:  # another node on this machine hosts it: torchrun connects as a client
            fd = None
        if fd is not None:
            store = dist.TCPStore(host, port, is_master=True, multi_tenant=True, master_listen_fd=fd,
                                  wait_for_workers=False, timeout=timedelta(seconds=60))
    from torch.distributed.run import main as torchrun_main

    try:
        torchrun_main(argv)
    finally:
        del store
    return 0


if __name__ == "__main__":
    sys.exit(main())
