"""A real SLURM cluster of this machine, in a folder: munged, slurmctld and slurmd (Debian's SLURM
22.05) with their own config, state, spool and logs, for the tests and for people who want to try
`workbench submit` before they meet a real cluster. The workbench finds it by the record it leaves
in the folder (workbench.distributed.clusters), never by importing this harness.

    # make slurm-up: prints the SLURM_CONF line
    python -m tools.localslurm up DIR [--nodes 2]
    python -m tools.localslurm down DIR   # make slurm-down: stops what `up` started

    with LocalSlurm(folder) as cluster:                    # the test fixture
        cluster.run(["sbatch", "--parsable", "job.slurm"])

The daemons live in network namespaces, test hosts with addresses from the range reserved for
network tests (198.18.0.0/15), joined to this machine by veth pairs (tools.netns):
nothing they open listens beyond those hosts and their loopback. Each node is one host with its own
slurmd (`slurmd -N NAME`, NodeAddr its address); the controller runs on the first. With
`nodes=2` a job's two nodes reach each other over the link between the hosts, as two machines
would; both see this machine's files, as a cluster's nodes see a shared file system. Commands that
talk to the cluster (sbatch, squeue, scancel, and `workbench submit` itself) run in the first
host's namespace: `cluster.prefix` is the words that put them there. Every daemon, the namespace
and the link are stopped or removed by what started
them, by pid. Needs root and the Debian packages slurmctld, slurmd, slurm-client and munge.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from workbench.distributed.clusters import STATE
from workbench.net import free_port
from .netns import TestNetwork

TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "scontrol", "ip", "nsenter")


def missing_tools() -> list[str]:
    """The programs a local cluster needs that this machine lacks (empty: it can run one)."""
    return [t for t in TOOLS if shutil.which(t) is None]


class LocalSlurm:
    """`nodes` nodes (1 or 2 test hosts of this machine, `cpus` CPUs each) in one partition, `debug`."""

    def __init__(self, folder: str | Path, cpus: int | None = None, memory_mib: int = 4000, nodes: int = 1):
        if nodes not in (1, 2):
            raise ValueError(f"nodes must be 1 or 2 (test hosts of this machine), got {nodes}")
        self.folder = Path(folder).resolve()
        self.cpus = cpus or os.cpu_count() or 1
        self.memory_mib = memory_mib
        self.network: TestNetwork | None = None  # the nodes' test hosts, made by `up`
        self.namespace = ""  # the first host's: the controller's, and where commands run
        self.namespaces: list[str] = []
        self.nodes = [f"node{i}" for i in range(nodes)]  # slurmd -N: its node's name
        self.addresses: list[str] = []  # each node's address (NodeAddr), made by `up`
        self.controller = socket.gethostname()  # slurmctld runs only where SlurmctldHost names it
        self.pids: dict[str, int] = {}
        self.machine_links: list[str] = []  # for `down` from another process
        self.conf = self.folder / "slurm.conf"

    # --- what commands need ------------------------------------------------------------------
    @property
    def prefix(self) -> list[str]:
        """Words that run a command in the cluster's network namespace."""
        return ["nsenter", f"--net=/var/run/netns/{self.namespace}"]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, command: list[str], timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        """A command in the cluster's namespace with its SLURM_CONF; output captured as text."""
        return subprocess.run(
            [*self.prefix, *command], env=self.env, capture_output=True, text=True, timeout=timeout, **kwargs
        )

    # --- up and down ---------------------------------------------------------------------------
    def up(self, timeout_s: float = 60) -> "LocalSlurm":
        lacking = missing_tools()
        if lacking:
            raise RuntimeError(
                f"a local SLURM cluster needs {', '.join(lacking)}: apt-get install "
                "slurmctld slurmd slurm-client munge"
            )
        for sub in ("state", "munge", *(f"spool/{name}" for name in self.nodes)):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        (self.folder / "munge").chmod(0o700)
        try:
            self._network()
            self._munge()
            self._write_conf()
            self._save()
            daemons = [("slurmctld", self.prefix, [])] + [
                (f"slurmd:{name}", host.prefix, ["-N", name])
                for name, host in zip(self.nodes, self.network.hosts)
            ]
            for daemon, prefix, args in daemons:
                log = open(self.folder / f"{daemon.replace(':', '-')}.out", "ab")
                proc = subprocess.Popen(
                    [*prefix, daemon.partition(":")[0], "-D", *args, "-f", str(self.conf)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    start_new_session=True,
                )
                log.close()
                self.pids[daemon] = proc.pid
                self._save()
            self._wait_idle(timeout_s)
        except BaseException:
            self.down()
            raise
        return self

    def _network(self) -> None:
        self.network = TestNetwork(len(self.nodes), bridge_to_machine=True).open()
        self.namespaces = [host.namespace for host in self.network.hosts]
        self.addresses = [host.address for host in self.network.hosts]
        self.namespace = self.namespaces[0]
        self.pids["netns"] = 0  # a name, not a process: removed by `down`

    def _munge(self) -> None:
        key = self.folder / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(secrets.token_bytes(1024))
            key.chmod(0o400)
        m = self.folder / "munge"
        subprocess.run(
            [
                "munged",
                f"--socket={m / 'munge.socket'}",
                f"--key-file={key}",
                f"--pid-file={m / 'munged.pid'}",
                f"--log-file={m / 'munged.log'}",
                f"--seed-file={m / 'munged.seed'}",
                "--force",
            ],
            check=True,
        )
        self.pids["munged"] = int((m / "munged.pid").read_text())

    def _write_conf(self) -> None:
        f = self.folder
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=workbench",
                    f"SlurmctldHost={self.controller}({self.addresses[0]})",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    f"SlurmctldPort={free_port()}",
                    f"SlurmdPort={free_port()}",
                    # cred_expire also holds a requeued job back before it starts again (120 s by default)
                    "AuthType=auth/munge",
                    f"AuthInfo=socket={f / 'munge' / 'munge.socket'},cred_expire=10",
                    "CredType=cred/munge",
                    # %n: each node's slurmd keeps its own spool, pid and log
                    f"StateSaveLocation={f / 'state'}",
                    f"SlurmdSpoolDir={f / 'spool' / '%n'}",
                    f"SlurmctldPidFile={f / 'slurmctld.pid'}",
                    f"SlurmdPidFile={f / 'slurmd-%n.pid'}",
                    f"SlurmctldLogFile={f / 'slurmctld.log'}",
                    f"SlurmdLogFile={f / 'slurmd-%n.log'}",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_CPU",
                    "MpiDefault=none",
                    "ReturnToService=2",
                    "MinJobAge=600",  # a finished job stays visible to squeue
                    # a node that stops answering (its link cut) is set DOWN, and its job ended with
                    # NODE_FAIL, within 10 s instead of 300: sooner than a run's distributed.timeout_s
                    "SlurmdTimeout=10",
                    "AccountingStorageType=accounting_storage/none",
                    "JobCompType=jobcomp/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "SchedulerParameters=batch_sched_delay=0",
                    *(
                        f"NodeName={name} NodeAddr={address} CPUs={self.cpus} "
                        f"RealMemory={self.memory_mib} State=UNKNOWN"
                        for name, address in zip(self.nodes, self.addresses)
                    ),
                    f"PartitionName=debug Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )

    def _wait_idle(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for daemon, pid in self.pids.items():
                if daemon.startswith("slurm") and not _alive(pid):
                    name = daemon.partition(":")[2]
                    log = self.folder / (f"slurmd-{name}.log" if name else f"{daemon}.log")
                    tail = log.read_text(errors="replace")[-800:] if log.is_file() else ""
                    raise RuntimeError(f"{daemon} exited while the cluster came up:\n{tail}")
            out = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=30).stdout.split()
            if sorted(out[0::2]) == self.nodes and all(state == "idle" for state in out[1::2]):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the local SLURM nodes were not idle after {timeout_s:g} s")

    def down(self) -> None:
        """Stop every daemon `up` started (by pid), remove the link and the namespace."""
        slurmds = sorted(d for d in self.pids if d.startswith("slurmd:"))
        for daemon in (*slurmds, "slurmctld", "munged"):
            pid = self.pids.pop(daemon, None)
            if pid:
                _stop(pid)
        if self.pids.pop("netns", None) is not None:
            if self.network is not None:
                self.network.close()
            else:  # loaded by another process: remove by the names `up` saved
                for link in self.machine_links:
                    subprocess.run(["ip", "link", "del", link], capture_output=True)
                for namespace in self.namespaces:
                    subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        self._save()

    def _save(self) -> None:
        links = self.network.machine_links if self.network else self.machine_links
        (self.folder / STATE).write_text(
            json.dumps(
                {
                    "namespace": self.namespace,
                    "namespaces": self.namespaces,
                    "links": links,
                    "pids": self.pids,
                    "conf": str(self.conf),
                    "prefix": self.prefix,
                }
            )
        )

    @classmethod
    def load(cls, folder: str | Path) -> "LocalSlurm":
        """The cluster `up` started in `folder` (for `down` from another process)."""
        state = json.loads((Path(folder) / STATE).read_text())
        cluster = cls(folder)
        cluster.namespace, cluster.machine_links = state["namespace"], state["links"]
        cluster.namespaces = state.get("namespaces") or [state["namespace"]]
        cluster.pids = {k: int(v) for k, v in state["pids"].items()}
        return cluster

    def __enter__(self) -> "LocalSlurm":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a child of ours that exited is a zombie until reaped
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return True


def _stop(pid: int, grace_s: float = 10.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.localslurm",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("folder")
    parser.add_argument(
        "--nodes",
        type=int,
        default=1,
        choices=[1, 2],
        help="nodes (test hosts with their own addresses); default 1",
    )
    args = parser.parse_args(argv)
    if args.action == "up":
        try:
            cluster = LocalSlurm(args.folder, nodes=args.nodes).up()
        except (RuntimeError, subprocess.CalledProcessError, OSError) as e:
            print(f"workbench: the local SLURM cluster did not come up: {e}", file=sys.stderr)
            return 1
        print(
            f"a SLURM cluster of this machine is up in {cluster.folder}; run commands with\n"
            f"  SLURM_CONF={cluster.conf} {' '.join(cluster.prefix)} sbatch ...\n"
            f"stop it with: python -m tools.localslurm down {cluster.folder}"
        )
        return 0
    LocalSlurm.load(args.folder).down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
