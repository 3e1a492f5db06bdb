"""Test hosts on this machine: network namespaces with their own addresses from the range reserved
for network tests (198.18.0.0/15), joined by veth pairs. Each host's programs see only its own
interfaces, so a run across two of them crosses a real network link, and a daemon started in one
listens only there. Needs root and `ip` (iproute2).

    with TestNetwork(2) as net:                 # hosts 198.18.N.1 and 198.18.N.2, one link
        subprocess.run([*net.hosts[0].prefix, "python", ...])

With `bridge_to_machine=True` the first host's link ends on this machine instead (this machine is
198.18.N.1, the host .2), for a daemon that this machine's programs must reach. Everything made is
removed by `close`, by name: the links go with their namespaces.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass

RANGE = "198.18.{subnet}.{host}"  # RFC 2544's benchmark range: never a real host


@dataclass
class Host:
    namespace: str
    address: str
    interface: str

    @property
    def prefix(self) -> list[str]:
        """Words that run a command on this host (its network only; the files are this machine's)."""
        return ["nsenter", f"--net=/var/run/netns/{self.namespace}"]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class TestNetwork:
    """One or two hosts on one /24: with two, a link between them; with `bridge_to_machine`, a link
    from host 0 to this machine as well."""

    __test__ = False  # not a pytest class

    def __init__(self, count: int = 2, bridge_to_machine: bool = False):
        if count not in (1, 2):
            raise ValueError(f"count must be 1 or 2, got {count}")
        self.tag = secrets.token_hex(3)
        self.subnet = int(self.tag, 16) % 250 + 1
        self.count, self.bridge_to_machine = count, bridge_to_machine
        self.hosts: list[Host] = []
        self.machine_links: list[str] = []  # veth ends left on this machine
        self.machine_address: str | None = None

    def address(self, n: int) -> str:
        return RANGE.format(subnet=self.subnet, host=n)

    def open(self) -> "TestNetwork":
        try:
            first = 2 if self.bridge_to_machine else 1
            for i in range(self.count):
                ns = f"wbnet-{self.tag}-{i}"
                _ip("netns", "add", ns)
                self.hosts.append(Host(ns, self.address(first + i), ""))
                _ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
            if self.bridge_to_machine:
                self._machine_link(self.hosts[0])
            if self.count == 2:
                self._link(self.hosts[0], self.hosts[1])
        except BaseException:
            self.close()
            raise
        return self

    def _machine_link(self, host: Host) -> None:
        here, there = f"wbm{self.tag}", f"wbm{self.tag}h"
        _ip("link", "add", here, "type", "veth", "peer", "name", there)
        self.machine_links.append(here)
        _ip("link", "set", there, "netns", host.namespace)
        self.machine_address = self.address(1)
        _ip("addr", "add", f"{self.machine_address}/24", "dev", here)
        _ip("link", "set", here, "up")
        self._up(host, there, host.address)

    def _link(self, a: Host, b: Host) -> None:
        end_a, end_b = f"wbl{self.tag}a", f"wbl{self.tag}b"
        _ip(
            "netns",
            "exec",
            a.namespace,
            "ip",
            "link",
            "add",
            end_a,
            "type",
            "veth",
            "peer",
            "name",
            end_b,
            "netns",
            b.namespace,
        )
        if a.interface:  # host 0 already has the machine's link and its address
            _ip("netns", "exec", a.namespace, "ip", "link", "set", end_a, "up")
            _ip("netns", "exec", a.namespace, "ip", "route", "add", f"{b.address}/32", "dev", end_a)
            _ip("netns", "exec", b.namespace, "ip", "addr", "add", f"{b.address}/32", "dev", end_b)
            _ip("netns", "exec", b.namespace, "ip", "link", "set", end_b, "up")
            _ip("netns", "exec", b.namespace, "ip", "route", "add", f"{a.address}/32", "dev", end_b)
            b.interface = end_b
        else:
            self._up(a, end_a, a.address)
            self._up(b, end_b, b.address)

    def _up(self, host: Host, interface: str, address: str) -> None:
        _ip("netns", "exec", host.namespace, "ip", "addr", "add", f"{address}/24", "dev", interface)
        _ip("netns", "exec", host.namespace, "ip", "link", "set", interface, "up")
        host.interface = host.interface or interface

    def set_link(self, n: int, up: bool) -> None:
        """Cut host `n`'s link (`ip link set down` on its end, as a pulled cable) or mend it. Down
        also drops the routes through it, so mending puts back the route a /32 address needs."""
        host = self.hosts[n]
        _ip("netns", "exec", host.namespace, "ip", "link", "set", host.interface, "up" if up else "down")
        if up and self.bridge_to_machine and n == 1:
            _ip(
                "netns",
                "exec",
                host.namespace,
                "ip",
                "route",
                "replace",
                f"{self.hosts[0].address}/32",
                "dev",
                host.interface,
            )

    def close(self) -> None:
        for link in self.machine_links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        self.machine_links.clear()
        for host in self.hosts:
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True)
        self.hosts.clear()

    def __enter__(self) -> "TestNetwork":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()
