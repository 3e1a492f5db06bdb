"""Two hosts on a real network link (network namespaces with their own addresses, 198.18.0.0/15):
one DDP run across them, each node started by `workbench run` on its own host, as on a cluster;
then one whose link to host B is cut mid-run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import psutil
import pytest

from tools.netns import TestNetwork
from workbench.events import ADDRESSES, read_events
from workbench.runfolder import RunFolder

from launch_helpers import assert_all_gone, wait_for_steps

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


def start_nodes(network, tmp_path, *settings: str, steps: int = 10) -> list[subprocess.Popen]:
    """`workbench run` on each host, node 0 on the head; each node's run folder is tmp_path/nodeN."""
    head, other = network.hosts
    endpoint = f"{head.address}:29500"
    nodes = []
    for rank, host in enumerate((head, other)):
        cmd = [
            *host.prefix,
            sys.executable,
            "-m",
            "workbench",
            "run",
            "--preset",
            "smoke",
            "--nnodes",
            "2",
            "--node-rank",
            str(rank),
            "--rdzv-endpoint",
            endpoint,
            "--steps",
            str(steps),
            "--set",
            "run.threads=1",
            "--set",
            "run.eval_batches=0",
            "--set",
            "distributed.start_timeout_s=120",
            *settings,
            "--run-dir",
            str(tmp_path / f"node{rank}"),
            "--json",
        ]
        nodes.append(
            subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "WORKBENCH_RUNS": str(tmp_path / "runs")},
            )
        )
    return nodes


def test_one_ddp_run_across_two_hosts(network, tmp_path):
    head, other = network.hosts
    nodes = start_nodes(network, tmp_path)
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
        ready = next(r for r in records if r["event"] == "ready")
        assert ready[ADDRESSES] == [head.address, other.address]  # each rank's, for the watchdog
        done = [r for r in records if r["event"] == "done"]
        assert len(done) == 1 and done[0]["world_size"] == 2
        sums.append(done[0]["param_sum"])
        ranks.add(done[0]["rank"])
        assert json.loads(outs[n][0])["status"] == "completed"
    assert ranks == {0, 1} and sums[0] == sums[1]  # DDP kept the two hosts' replicas identical


TIMEOUT_S = 20


def test_host_b_cut_off_mid_run_is_named_on_both_hosts_and_nothing_is_left(network, tmp_path):
    """Host B's link goes down (`ip link set down` in B's namespace) while both ranks train: each
    node's ranks time out waiting for the other, its watchdog finds the other node silent on the
    network and names it, and every process of the run on either host ends."""
    head, other = network.hosts
    nodes = start_nodes(network, tmp_path, "--set", f"distributed.timeout_s={TIMEOUT_S}", steps=100000)
    try:
        for n in (0, 1):
            wait_for_steps(tmp_path / f"node{n}", ranks=1, step=3, timeout=240)
        ranks = {
            n: next(r["pid"] for r in read_events(tmp_path / f"node{n}") if r["event"] == "start")
            for n in (0, 1)
        }
        tree = set(ranks.values())
        for n, pid in ranks.items():  # the rank, its torchrun agent and the supervisor above it
            tree |= {p.pid for p in psutil.Process(pid).parents()[:2]}
        cut = time.monotonic()
        network.set_link(1, up=False)
        outs = [p.communicate(timeout=TIMEOUT_S + 120) for p in nodes]
        took = time.monotonic() - cut
    finally:
        for p in nodes:
            if p.poll() is None:
                p.kill()
    summaries = [json.loads(out) for out, _ in outs]
    for n, (summary, (lost, rank)) in enumerate(zip(summaries, ((other, 1), (head, 0)))):
        assert summary["status"] == "failed" and summary["cause"] == "node_unreachable", (
            summary,
            outs[n][1][-2000:],
        )
        message = summary["message"]
        assert f"lost contact with node {rank} ({lost.address}, rank(s) {rank})" in message, message
        assert summary["failed_rank"] == rank and "\n" not in message
    # the ranks' collectives time out TIMEOUT_S after the last step began; then a probe (2 s at
    # most) and the sweep: allow a few seconds for a loaded machine
    print(f"both nodes' runs ended {took:.1f} s after the cut (distributed.timeout_s={TIMEOUT_S})")
    assert took < TIMEOUT_S + 15, took
    assert_all_gone(tree, within=15)
