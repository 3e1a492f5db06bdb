"""Where a trial's training variants run (workbench.trials.engine): warm processes that live for the
whole comparison (functions in this process: workbench.trials.calls).

    hosts = TrainingHosts(baseline)              # threads chosen once, from what the machine has free
    hosts.add("fp32", cfg)                       # built once in a warm host process
    hosts.add("bf16", cfg.replace(**{"precision.dtype": "bf16"}))
    trial = Trial(hosts.of(["fp32", "bf16"]))    # slices of both alternate in that process
    hosts.close()                                # every host process ends

Variants that one process can host share one (precision, channels_last, the optimizer, the batch,
checkpointing, compile): both sides of a pair then meet the same process and the same machine.
Variants that need processes of their own (ranks, loader workers, a thread count of their own) get a
warm host each, started once and switched by slices, never a process start per round. Every host
process gets the same threads and OpenMP wait policy, chosen once from what other programs held at
the start (workbench.machine.threads), so a ratio is of the change alone.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

from ..config import ConfigError, RunConfig
from ..disk import open_log
from ..machine.allocator import allocator_env
from ..machine.capability import resolve_device
from ..machine.fit import cannot_run
from ..machine.threads import ThreadChoice, choose_threads, other_cores_now
from ..runstore import runs_root
from ..distributed.torchrun import rank_command
from .engine import Slice

HOST = ["-m", "workbench.train.host"]
START_TIMEOUT_S = 180.0  # a host's start: Python, torch, and under several ranks the rendezvous


class TrialError(ConfigError):
    """A variant that could not be built or run: one line naming it, its host's log beside."""


def host_key(cfg: RunConfig) -> tuple:
    """What a variant's process must have of its own: its ranks, its loader workers, its threads.
    Variants with equal keys share one warm process."""
    d = cfg.distributed
    return (
        d.nproc,
        d.nnodes,
        d.strategy if d.world_size > 1 else "",
        cfg.loader.num_workers,
        cfg.loader.persistent_workers if cfg.loader.num_workers else False,
        cfg.run.threads,
        cfg.run.allocator,
    )


class ProcessHost:
    """A warm process (or a torchrun group of ranks) that builds training variants once and runs
    slices of their steps (workbench.train.host)."""

    def __init__(
        self, cfg: RunConfig, folder: Path, threads: ThreadChoice, name: str, timeout_s: float = 900.0
    ):
        self.folder, self.name, self.timeout_s = folder, name, timeout_s
        self._sockdir = tempfile.mkdtemp(prefix="wb-trial-")  # short: a socket path holds 107 bytes
        address = os.path.join(self._sockdir, "host.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(address)
        listener.listen(1)
        program = [*HOST, "--address", address, "--folder", str(folder)]
        if cfg.distributed.world_size > 1:
            first = folder / f"{name}.config.json"
            cfg.save(first)
            program += ["--config", str(first)]
        self.command = rank_command(cfg.distributed, program, str(folder / f"{name}-torchrun"))
        self.log_path = folder / f"{name}.log"
        env = {**os.environ, **allocator_env(cfg.run.allocator), **threads.env(), "PYTHONUNBUFFERED": "1"}
        with open_log(self.log_path) as log:
            self.proc = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        try:
            self.conn = self._accept(listener)
        except BaseException:
            self.close()
            raise
        finally:
            listener.close()

    def _accept(self, listener: socket.socket) -> Connection:
        deadline = time.monotonic() + START_TIMEOUT_S
        listener.settimeout(1.0)
        while time.monotonic() < deadline:
            try:
                sock, _ = listener.accept()
                return Connection(sock.detach())
            except socket.timeout:
                if self.proc.poll() is not None:
                    raise TrialError(
                        f"the trial's host process ended ({self.proc.returncode}) "
                        f"before it started: {self.log_tail()}"
                    ) from None
        raise TrialError(
            f"the trial's host process did not start in {START_TIMEOUT_S:.0f} s (see {self.log_path})"
        )

    def log_tail(self, n: int = 600) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:].strip() or "(no output)"
        except OSError:
            return "(no log)"

    def ask(self, msg: dict, timeout_s: float | None = None) -> dict:
        """One request and its reply; a host that died or went silent is a TrialError."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        try:
            self.conn.send(msg)
            while not self.conn.poll(1.0):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    break
            else:
                reply = self.conn.recv()
                if "error" in reply:
                    raise TrialError(f"{msg.get('label', 'the trial')}: {reply['type']}: {reply['error']}")
                return reply
        except (EOFError, OSError):
            pass
        code = self.proc.poll()
        waited = timeout_s or self.timeout_s
        what = f"ended ({code})" if code is not None else f"gave no answer in {waited:.0f} s"
        self.close()
        raise TrialError(
            f"{msg.get('label', 'the trial')}: its host process {what} during "
            f"'{msg['op']}': {self.log_tail()}"
        )

    def build(self, label: str, cfg: RunConfig) -> dict:
        return self.ask({"op": "build", "label": label, "config": cfg.to_dict()})

    def slice(self, label: str, seconds: float) -> Slice:
        return self.pair([label], seconds)[label]

    def pair(self, labels: list[str], seconds: float) -> dict[str, Slice]:
        """A slice of each of `labels`, their steps interleaved in short chunks (workbench.train.host)."""
        got = self.ask({"op": "slice", "labels": list(labels), "seconds": seconds, "label": labels[0]})[
            "slices"
        ]
        return {
            label: Slice(
                label,
                r["work"],
                r["wall_s"],
                r["cpu_s"],
                r["other_cores"],
                steps=r["steps"],
                losses=r["losses"],
                threads=r["threads"],
            )
            for label, r in zip(labels, got)
        }

    def memory(self, label: str) -> dict:
        return self.ask({"op": "memory", "label": label})["memory"]

    def matmuls(self, label: str) -> list[dict]:
        """The shapes of the matrix products of one forward of `label` (workbench.train.matmul_shapes)."""
        return self.ask({"op": "matmuls", "label": label})["matmuls"]

    def save(self, label: str) -> None:
        """Its weights in its folder (model.pt), as a run saves them."""
        self.ask({"op": "save", "label": label})

    def drop(self, label: str) -> None:
        self.ask({"op": "drop", "label": label})

    def close(self) -> None:
        """End the host: asked first, then its whole process group, by signal."""
        if getattr(self, "conn", None) is not None and self.proc.poll() is None:
            try:
                self.conn.send({"op": "close"})
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(self.proc.pid, sig)
                    self.proc.wait(5)
                    break
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
        if getattr(self, "conn", None) is not None:
            self.conn.close()
            self.conn = None
        shutil.rmtree(self._sockdir, ignore_errors=True)


class TrainingHosts:
    """The warm host processes of one comparison, a host per `host_key`; a context manager that
    ends them all."""

    def __init__(
        self,
        baseline: RunConfig,
        folder: str | Path | None = None,
        threads: ThreadChoice | None = None,
        timeout_s: float = 900.0,
    ):
        self.baseline = baseline
        stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}-{time.monotonic_ns() % 10**6}"
        self.folder = Path(folder) if folder else runs_root(baseline) / "trials" / stamp
        self.folder.mkdir(parents=True, exist_ok=True)
        self.threads = threads or choose_threads(baseline, other_cores_now()).fixed()
        self.timeout_s = timeout_s
        self.hosts: dict[tuple, ProcessHost] = {}
        self.variants: dict[str, ProcessHost] = {}
        self.built: dict[str, dict] = {}  # label -> what its build reported (pace, losses, run_dir)
        self._log = open(self.folder / "slices.jsonl", "a")
        (self.folder / "threads.json").write_text(json.dumps(self.threads.as_dict()))

    def refusal(self, cfg: RunConfig) -> str | None:
        """What this machine cannot run (the launch's rule), or None."""
        return cannot_run(cfg, resolve_device(cfg.run.device))

    def add(self, label: str, cfg: RunConfig) -> dict:
        """Build `label` in its host (started if it is the first of its kind); a TrialError names
        what failed, and nothing else is disturbed."""
        if label in self.variants:
            return self.built[label]
        reason = self.refusal(cfg)
        if reason:
            raise TrialError(f"{label}: {reason}")
        key = host_key(cfg)
        host = self.hosts.get(key)
        if host is None or host.proc.poll() is not None:
            host = self.hosts[key] = ProcessHost(
                cfg, self.folder, self.threads, f"host{len(self.hosts)}", self.timeout_s
            )
        try:
            self.built[label] = host.build(label, cfg)
        except TrialError:
            if host.proc.poll() is not None:
                self.hosts.pop(key, None)
            raise
        self.variants[label] = host
        return self.built[label]

    def drop(self, label: str) -> None:
        host = self.variants.pop(label, None)
        if host is not None and host.proc.poll() is None:
            host.drop(label)

    def of(self, labels) -> dict:
        return {label: self.variants[label] for label in labels}

    def record(self, s: Slice) -> None:
        """Every slice in the trial folder's slices.jsonl: a stopped comparison keeps what it measured."""
        self._log.write(json.dumps({"t": round(time.time(), 3), **s.as_dict()}) + "\n")
        self._log.flush()

    def close(self) -> None:
        for host in self.hosts.values():
            host.close()
        self.hosts.clear()
        self.variants.clear()
        if not self._log.closed:
            self._log.close()

    def __enter__(self) -> "TrainingHosts":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
