"""Two hosts on a real network link (network namespaces with their own addresses, 198.18.0.0/15):
one DDP run across them, each node started by `workbench run` on its own host, as on a cluster."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from workbench.distributed.netns import TestNetwork
from workbench.events import read_events
from workbench.runfolder import RunFolder

pytestmark = pytest.mark.slow


@pytest.fixture
def network():
    lacking = [t for t in ("ip", "nsenter") if shutil.which(t) is None]
    if lacking or os.geteuid() != 0:
        why = f"needs root and {', '.join(lacking) or 'nothing more'}"
        if os.environ.get("WORKBENCH_REQUIRE_NETNS"):
            pytest.fail(f"the test hosts must be made here but cannot: {why}")
        pytest.skip(f"test hosts {why}")
    with TestNetwork(2) as net:
        made = [h.namespace for h in net.hosts]
        yield net
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert len(made) == 2 and not [ns for ns in made if ns in left]  # both hosts removed


def test_one_ddp_run_across_two_hosts(network, tmp_path):
    head, other = network.hosts
    endpoint = f"{head.address}:29500"
    nodes = []
    for rank, host in enumerate((head, other)):
        cmd = [*host.prefix, sys.executable, "-m", "workbench", "run", "--preset", "smoke",
               "--nnodes", "2", "--node-rank", str(rank), "--rdzv-endpoint", endpoint,
               "--steps", "10", "--set", "run.threads=1", "--set", "run.eval_batches=0",
               "--set", "distributed.start_timeout_s=120", "--run-dir", str(tmp_path / f"node{rank}"),
               "--json"]
        nodes.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env={**os.environ, "WORKBENCH_RUNS": str(tmp_path / "runs")}))
    outs = [p.communicate(timeout=300) for p in nodes]
    for p, (out, err) in zip(nodes, outs):
        assert p.returncode == 0, err[-3000:]
    sums, ranks = [], set()
    for n, host in enumerate((head, other)):
        folder = RunFolder(tmp_path / f"node{n}")
        command = " ".join(folder.launch()["command"])
        # each node speaks from its own address on the link, not from loopback
        assert f"--local-addr {host.address}" in command
        assert f"GLOO_SOCKET_IFNAME={host.interface}" in command
        records = read_events(folder.path)
        start = next(r for r in records if r["event"] == "start")
        assert start["master_addr"] == head.address  # the group met on the head host's address
        done = [r for r in records if r["event"] == "done"]
        assert len(done) == 1 and done[0]["world_size"] == 2
        sums.append(done[0]["param_sum"])
        ranks.add(done[0]["rank"])
        assert json.loads(outs[n][0])["status"] == "completed"
    assert ranks == {0, 1} and sums[0] == sums[1]  # DDP kept the two hosts' replicas identical
