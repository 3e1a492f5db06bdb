"""All-reduce bus bandwidth across ranks, one process per device, launched with torchrun:

    python -m workbench.loopback --nnodes=1 --nproc-per-node=2 --rdzv-backend=c10d \
        --rdzv-endpoint=127.0.0.1:29500 --local-addr 127.0.0.1 \
        -m workbench.hardware.allreduce --device cpu --mib 64 --out ar.json

`main` runs in each rank, `run_allreduce` in the process that asks for the figure; every store of
the run listens on 127.0.0.1 only. Bus bandwidth = bytes / time x 2(n-1)/n, the figure comparable
across rank counts (each byte crosses the links 2(n-1)/n times in a ring all-reduce). Rank 0
writes the result as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from ..distributed.torchrun import loopback_env, loopback_runner, torchrun_args
from ..measure.timer import measure
from ..net import LOOPBACK, free_port
from ..procs import leave
from ..train.rank import RankEnv, process_group_store
from .ceiling import Ceiling


def busbw_gbs(nbytes: int, ms: float, ranks: int) -> float:
    return nbytes / (ms / 1e3) / 1e9 * 2 * (ranks - 1) / ranks


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.hardware.allreduce")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)

    env = RankEnv.from_environ()
    if args.device == "cuda":
        torch.cuda.set_device(env.local_rank)
        device = torch.device("cuda", env.local_rank)
    else:
        device = torch.device("cpu")
    store = process_group_store(env.rank, env.world_size, timeout_s=120)
    backend = "nccl" if args.device == "cuda" else "gloo"
    if store:  # torch's own arguments, not a record's fields
        dist.init_process_group(
            backend, timeout=timedelta(seconds=120), store=store, rank=env.rank, world_size=env.world_size
        )
    else:
        dist.init_process_group(backend, timeout=timedelta(seconds=120))
    try:
        x = torch.randn(args.mib * 2**20 // 4, device=device)
        t = measure(lambda: dist.all_reduce(x), device=device, warmup=2, repeats=args.repeats)
        if env.rank == 0:
            nbytes = x.numel() * 4
            Path(args.out).write_text(
                json.dumps(
                    {
                        "ranks": env.world_size,
                        "mib": args.mib,
                        "median_ms": t.median_ms,
                        "spread": t.spread,
                        "busbw_gbs": busbw_gbs(nbytes, t.median_ms, env.world_size),
                        "backend": dist.get_backend(),
                    }
                )
            )
    finally:
        dist.destroy_process_group()
    return 0


def run_allreduce(ranks: int, device: str = "cpu", mib: int = 64, timeout_s: float = 180) -> Ceiling:
    """Launch the measurement under torchrun on 127.0.0.1 and return it as a Ceiling."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "allreduce.json"
        program = [
            "-m",
            "workbench.hardware.allreduce",
            "--device",
            device,
            "--mib",
            str(mib),
            "--out",
            str(out),
        ]
        cmd = torchrun_args(
            program, nproc=ranks, endpoint=f"{LOOPBACK}:{free_port()}", runner=loopback_runner()
        )
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=dict(os.environ, OMP_NUM_THREADS="1", **loopback_env()),
        )
        if proc.returncode != 0 or not out.is_file():
            raise RuntimeError(
                f"all-reduce benchmark failed (exit {proc.returncode}): {(proc.stderr or proc.stdout)[-300:]}"
            )
        r = json.loads(out.read_text())
    return Ceiling(
        "all-reduce",
        "bandwidth",
        round(r["busbw_gbs"], 3),
        "GB/s",
        r["median_ms"],
        round(r["spread"], 3),
        f"{mib} MiB x {ranks} ranks",
        device,
        note=f"bus bandwidth, {r['backend']}",
    )


if __name__ == "__main__":
    leave(main())
