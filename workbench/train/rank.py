"""What torchrun tells a rank (RANK, LOCAL_RANK, WORLD_SIZE, the restart count), which device and
process-group backend it uses, and how it joins the group with rank 0's store on MASTER_ADDR only
(127.0.0.1, or rank 0's address toward the other nodes), not on every interface.

The backend rule ("auto": nccl on GPUs, gloo on CPUs) lives in workbench.machine.fit, with the
rest of what this machine can run; a rank asks it here, and the exported script copies it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ..machine.capability import resolve_device
from ..machine.fit import backend_for
from ..net import is_address, listen_fd, route_to


# Attempts that came before this launch: a SLURM job requeued n times starts torchrun afresh, so its
# batch file sets this to n x (max_restarts + 1) and every attempt of the run keeps its own number.
ATTEMPT_BASE_ENV = "WORKBENCH_ATTEMPT_BASE"


@dataclass
class RankEnv:
    """What torchrun tells a worker through its environment (defaults for a plain process)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    attempt: int = 0  # torchrun's restart count, after the attempts of earlier SLURM requeues

    @classmethod
    def from_environ(cls, environ=os.environ) -> "RankEnv":
        get = lambda k, d: int(environ.get(k, d))  # noqa: E731
        return cls(
            get("RANK", 0),
            get("LOCAL_RANK", 0),
            get("WORLD_SIZE", 1),
            get(ATTEMPT_BASE_ENV, 0) + get("TORCHELASTIC_RESTART_COUNT", 0),
        )


def pick_device(cfg, local_rank: int) -> torch.device:
    """The run's device; on a GPU machine this node's `local_rank`-th GPU, made current."""
    device = resolve_device(cfg.run.device)
    if device.type == "cuda":
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    return device


def _store_address() -> tuple[str, int] | None:
    """Where rank 0 serves the process-group store itself and the others reach it: MASTER_ADDR
    when it is an IP address (127.0.0.1, or rank 0's --local-addr toward the other nodes), which
    rank 0 binds alone. None for a host name (every rank joins the ordinary way: all of them must
    agree) or when torchrun shares its own store with the ranks."""
    host, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    if not port or not is_address(host) or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return None
    return host, int(port)


_HELD_FDS: dict[tuple[str, int], int] = {}  # store ports bound ahead by a warm rank 0


def hold_store_port(rank: int) -> None:
    """A warm rank 0 may wait minutes for its run: bind the port torchrun gave its store now, so
    no other program takes it meanwhile (process_group_store adopts the socket)."""
    address = _store_address()
    if rank == 0 and address and address not in _HELD_FDS:
        _HELD_FDS[address] = listen_fd(*address)


def process_group_store(rank: int, world_size: int, timeout_s: float):
    """A store for init_process_group bound to MASTER_ADDR, or None (see _store_address).
    torch's TCPStore server listens on every interface; adopting a socket that listens on
    that one address keeps it off the others."""
    address = _store_address()
    if address is None:
        return None
    host, port = address
    timeout = timedelta(seconds=timeout_s)
    if rank == 0:
        fd = _HELD_FDS.pop(address, None)
        return dist.TCPStore(
            host,
            port,
            world_size,
            is_master=True,
            timeout=timeout,
            master_listen_fd=fd if fd is not None else listen_fd(host, port),
            wait_for_workers=False,
        )
    return dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)


def join_group(cfg, env: RankEnv, device: torch.device) -> list[str]:
    """init_process_group for a multi-rank run (a no-op for one process). Across machines, returns
    every rank's address toward rank 0, by rank, gathered once: how a node's supervisor probes the
    others when its ranks time out waiting for them (workbench.distributed.watchdog); else []."""
    if env.world_size == 1 or dist.is_initialized():
        return []
    store = process_group_store(env.rank, env.world_size, cfg.distributed.timeout_s)
    timeout = timedelta(seconds=cfg.distributed.timeout_s)
    if store:  # torch's own arguments, not a record's fields
        dist.init_process_group(
            backend_for(cfg, device), timeout=timeout, store=store, rank=env.rank, world_size=env.world_size
        )
    else:
        dist.init_process_group(backend_for(cfg, device), timeout=timeout)
    if cfg.distributed.nnodes == 1:
        return []
    master = os.environ.get("MASTER_ADDR")
    route = route_to(master) if master else None
    addresses = [""] * env.world_size
    dist.all_gather_object(addresses, route[0] if route else "")
    return addresses


# A rank never frees its DDP reducer, and with it the gloo process group: that teardown joins the
# group's threads holding the GIL, while a thread still dropping a finished all-reduce (which keeps
# the backward pass's Python context) waits for the GIL; seen as a rank that hung after its last
# step. A rank of several then leaves with os._exit (procs.leave), so the OS reclaims them.
_NEVER_FREED: list = []


def leave_group(model: torch.nn.Module) -> None:
    """Destroy the process group after the last step, keeping `model` (and the group its DDP
    reducer holds) alive until the process leaves. Copied into exported scripts."""
    _NEVER_FREED.append(model)
    dist.destroy_process_group()


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The plain module under torch.compile and DDP."""
    model = getattr(model, "_orig_mod", model)
    return model.module if isinstance(model, DDP) else model
