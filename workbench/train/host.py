"""A warm process that hosts training variants for the trial engine (workbench.trials): each variant
is built once, as a run's setup builds it (the same seed, so the same initial weights and the same
data order), and then runs slices of its steps on request. One process, or a torchrun group whose
rank 0 takes the requests and hands each to the other ranks.

    python -m workbench.train.host --address SOCKET --folder TRIAL_DIR    # started by trials.hosts

Requests are dicts over a Unix socket that only this machine's owner can open: build a variant,
run a slice of one or several (their steps interleaved in short chunks, A B B A ...), report a
variant's memory per rank or the shapes of its matrix products, save its weights, drop it, close.
A slice reports its samples, its wall time, the CPU time of this process tree and the cores other
programs held meanwhile, and its losses.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import socket
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path

from ..procs import leave, set_pdeathsig

PACE_STEPS = 2  # steps run when a variant is built: its first pays for lazy init, the next sets the pace
# Seconds of one variant's steps before the next takes its turn inside an interleaved slice: short
# enough that the variants meet the same machine (beside busy programs a process's speed switches
# level within a second), long enough that each chunk runs on warm caches.
CHUNK_S = 0.02


class Variant:
    """One variant built in this process: what its steps run on, and its pace."""

    def __init__(self, label: str, cfg, folder: Path, env):
        from ..events import EventWriter
        from ..machine.threads import threads_for
        from ..runfolder import RunFolder
        from .instruments import measuring
        from .trainer import Phase, setup

        self.label, self.cfg, self.env = label, cfg, env
        self.dir = folder / label
        self.dir.mkdir(parents=True, exist_ok=True)
        if env.rank == 0:
            cfg.save(RunFolder(self.dir).config_file)
        self.events = EventWriter(self.dir, env.rank)
        self.phase = Phase()
        self.threads = threads_for(cfg)
        self.s = setup(cfg, self.events, env, self.phase)
        self.held: dict = {}
        self.step_s = None
        self.steps_done = 0
        self.step_times: list[float] = []  # seconds of each step after the build's
        self.last_loss = None
        self.losses_at_build = []
        for i in range(PACE_STEPS):  # the first measures what a step holds (untimed), as a run does
            t0 = time.perf_counter()
            self.losses_at_build.append(
                self._step(measuring(self.s.parts.model, self.held) if i == 0 else None)
            )
            self.step_s = time.perf_counter() - t0

    def _step(self, phase=None) -> float:
        """One training step, recorded in its folder as a run's step is (its number, loss, time and
        rate), so the folder reads as a run: compared, exported, reproduced."""
        from ..events import LOSS, SAMPLES_PER_S, STEP, STEP_NUMBER, STEP_TIME_MS
        from .step import train_step

        t0 = time.perf_counter()
        loss, samples, _ = train_step(self.s.parts, self.s.batches, *([phase] if phase else []))
        took = time.perf_counter() - t0
        self.samples_per_step = samples * self.env.world_size
        self.steps_done += 1
        self.last_loss = loss
        if self.steps_done > PACE_STEPS:
            self.step_times.append(took)
        self.events.write(
            STEP,
            **{
                STEP_NUMBER: self.steps_done,
                LOSS: loss,
                STEP_TIME_MS: round(took * 1e3, 4),
                SAMPLES_PER_S: round(samples / took, 2) if took > 0 else None,
            },
        )
        return loss

    def chunk(self, steps: int) -> tuple[float, list[float]]:
        """`steps` steps at this variant's threads: their seconds (device synced) and losses."""
        import torch

        from ..measure.timer import device_sync

        torch.set_num_threads(self.threads)
        t0 = time.perf_counter()
        losses = [self._step() for _ in range(steps)]
        device_sync(self.s.parts.device)
        return time.perf_counter() - t0, losses

    def memory(self) -> dict:
        from .trainer import memory_per_rank

        return memory_per_rank(self.cfg, self.s, self.env, self.held)

    def matmuls(self) -> list[dict]:
        """The matrix products of one forward on the first batch of its data, with their shapes
        (workbench.train.matmul_shapes): what the precision lesson places on the size curve."""
        import torch

        from .flops import first_batch
        from .matmul_shapes import matmul_shapes
        from .rank import unwrap

        x, _ = first_batch(self.s.data.train, self.cfg.loader.batch_size, self.s.parts.device)
        if self.cfg.precision.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        return matmul_shapes(unwrap(self.s.parts.model), x, self.s.parts.amp)

    def save(self) -> None:
        """Its weights as a run saves them (model.pt, whole under FSDP): what it has trained so far."""
        import io

        import torch

        from ..disk import write_atomic
        from ..runfolder import RunFolder
        from .rank import unwrap
        from .trainer import full_state

        state = full_state(unwrap(self.s.parts.model), self.cfg)  # under FSDP every rank gathers
        if self.env.rank == 0:
            buffer = io.BytesIO()
            torch.save(state, buffer)
            write_atomic(RunFolder(self.dir).weights_file, buffer.getvalue())

    def close(self) -> None:
        """Its end, as a run's: a done record and (rank 0) the summary, marked a trial variant whose
        steps ran in slices beside other variants' (its step times are the slices', not a run's)."""
        import statistics

        from ..events import DONE, SAMPLES_PER_S, WORLD_SIZE
        from ..runfolder import RunFolder
        from . import memory_readings

        median = statistics.median(self.step_times) if self.step_times else None
        summary = {
            "status": "completed",
            "steps": self.steps_done,
            "final_loss": self.last_loss,
            "precision": self.cfg.precision.dtype,
            "threads": self.threads,
            WORLD_SIZE: self.env.world_size,
            "step_time_ms_median": None if median is None else round(median * 1e3, 4),
            SAMPLES_PER_S: None if not median else round(self.samples_per_step / median, 2),
            **memory_readings.sample(self.s.parts.device),  # the host's: its variants share it
            "trial_variant": True,
            "ended_note": "a trial's variant: its steps ran in slices interleaved with other variants'",
        }
        try:
            self.events.write(DONE, **summary)
            if self.env.rank == 0:
                RunFolder(self.dir).write_summary(summary)
        except (OSError, ValueError):
            pass  # a full disk: the slices already reported what they measured
        self.events.close()


def plan(variants: list[Variant], seconds: float) -> dict:
    """How a slice of `seconds` runs: `turns` turns of about CHUNK_S, in each of which every variant
    runs `per_turn` steps at its pace so far (a fraction: see `steps_in_turn`). Every variant gets the
    same turns and, on average, the same seconds in each, so what a switch between variants costs
    weighs the same on every side; whole steps a turn would not (4 steps against 5 is 20 %)."""
    turns = max(1, round(seconds / CHUNK_S))
    return {"turns": turns, "per_turn": [CHUNK_S / (v.step_s or seconds) for v in variants]}


def steps_in_turn(per_turn: float, turn: int) -> int:
    """Whole steps in `turn` that keep the steps so far at per_turn a turn (1.5: 1, 2, 1, 2, ...)."""
    return math.floor((turn + 1) * per_turn) - math.floor(turn * per_turn)


def interleave(variants: list[Variant], how: dict) -> list[dict]:
    """The variants take turns in alternating order (A B B A ...), each running its steps of the
    turn (`plan`), so all of them meet the same machine moment by moment; one reading of what other
    programs held covers them all, and the CPU time of this process tree is shared by their seconds."""
    from ..machine.contention import ContentionMeter
    from ..measure.order import order_of

    env = variants[0].env
    meter = ContentionMeter(os.getpid() if env.world_size == 1 else os.getppid())  # ranks: their agent
    walls, losses = [0.0] * len(variants), [[] for _ in variants]
    for turn in range(how["turns"]):
        for i in order_of(range(len(variants)), turn):
            k = steps_in_turn(how["per_turn"][i], turn)
            if turn == how["turns"] - 1 and not losses[i]:
                k = max(k, 1)  # a step longer than the slice still runs once
            if k:
                dt, got = variants[i].chunk(k)
                walls[i] += dt
                losses[i] += got
    seen = meter.read()
    own = seen["own_cpu_cores"] * seen["wall_s"]
    out = []
    for v, wall, got in zip(variants, walls, losses):
        n = len(got)
        v.step_s = wall / n
        out.append(
            {
                "work": float(v.samples_per_step * n),
                "wall_s": wall,
                "cpu_s": own * wall / max(sum(walls), 1e-9),
                "other_cores": seen["other_cpu_cores"],
                "steps": n,
                "losses": got,
                "threads": v.threads,
            }
        )
    return out


def _connect(address: str) -> Connection:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    return Connection(sock.detach())


def serve(conn: Connection | None, folder: Path) -> None:
    """Answer requests until `close` or the end of the connection (rank 0 reads them; under several
    ranks every request is handed to all, so collectives in a step or a report line up)."""
    import torch.distributed as dist

    from ..config import RunConfig
    from .rank import RankEnv

    env = RankEnv.from_environ()
    variants: dict[str, Variant] = {}
    while True:
        msg = None
        if conn is not None:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                msg = {"op": "close"}
            if msg.get("op") == "slice":  # rank 0 turns seconds into steps: every rank runs as many
                chosen = [variants.get(label) for label in msg["labels"]]
                if all(chosen):
                    msg["plan"] = plan(chosen, msg["seconds"])
        if env.world_size > 1 and dist.is_initialized():
            box = [msg]
            dist.broadcast_object_list(box, src=0)
            msg = box[0]
        op = msg["op"]
        if op == "close":
            break
        try:
            if op == "build":
                cfg = RunConfig.from_dict(msg["config"])
                variants[msg["label"]] = v = Variant(msg["label"], cfg, folder, env)
                reply = {
                    "step_s": v.step_s,
                    "threads": v.threads,
                    "losses": v.losses_at_build,
                    "run_dir": str(v.dir),
                }
            elif op == "slice":
                chosen = [variants[label] for label in msg["labels"]]
                reply = {"slices": interleave(chosen, msg["plan"])}
            elif op == "memory":
                reply = {"memory": variants[msg["label"]].memory()}
            elif op == "matmuls":
                reply = {"matmuls": variants[msg["label"]].matmuls()}
            elif op == "save":
                variants[msg["label"]].save()
                reply = {}
            elif op == "drop":
                v = variants.pop(msg["label"], None)
                if v is not None:
                    v.close()
                gc.collect()
                reply = {}
            else:
                reply = {"error": f"unknown request {op!r}", "type": "ValueError"}
        except Exception as e:  # noqa: BLE001 - the parent names the variant and the error
            reply = {
                "error": str(e) or type(e).__name__,
                "type": type(e).__name__,
                "traceback": traceback.format_exc(),
            }
        if conn is not None:
            conn.send(reply)
    for v in variants.values():
        v.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m workbench.train.host",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--address", required=True, help="the Unix socket rank 0 connects to")
    p.add_argument("--folder", required=True, help="where each variant's config and events go")
    p.add_argument("--config", help="under several ranks: a config whose process group they join")
    args = p.parse_args(argv)
    set_pdeathsig()  # the trial's owner (or torchrun) gone: this host goes too
    rank = int(os.environ.get("RANK", 0))
    if args.config:  # the group first, so every request can be handed to every rank
        from ..config import RunConfig
        from .rank import RankEnv, join_group, pick_device

        cfg = RunConfig.load(args.config)
        env = RankEnv.from_environ()
        join_group(cfg, env, pick_device(cfg, env.local_rank))
    conn = _connect(args.address) if rank == 0 else None
    serve(conn, Path(args.folder))
    return 0


if __name__ == "__main__":
    leave(main())
