"""Networking shared by the launcher, the torchrun agent and the ranks: free ports, "is this
address loopback", listening sockets bound to exactly one address, and which of this machine's
addresses and interfaces reach another host (stdlib only, Linux).

torch's TCPStore server listens on every interface whatever host it is given; handing it a socket
that already listens on 127.0.0.1 (`listen_fd`) keeps a single-node run off the network.
"""

from __future__ import annotations

import ipaddress
import socket

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_address(host: str) -> bool:
    """Whether `host` is an IP address, not a name."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def listen_fd(host: str, port: int) -> int:
    """A listening socket on exactly host:port, handed over as a bare fd (the store closes it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(512)
    return sock.detach()


def route_to(host: str) -> tuple[str, str | None] | None:
    """This machine's address on the route to `host`, and its interface's name (None when no
    interface holds it as its IPv4 address); None when `host` cannot be resolved or reached. No
    packet is sent: connecting a UDP socket only asks the kernel for the route."""
    target = ipv4_of(host)
    if target is None:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, 9))
            address = s.getsockname()[0]
    except OSError:
        return None
    return address, interface_of(address)


def ipv4_of(host: str) -> str | None:
    """The IPv4 address `host` resolves to, or None."""
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
    except OSError:
        return None


def interface_of(address: str) -> str | None:
    """The interface whose IPv4 address is `address`."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:  # SIOCGIFADDR: the interface's IPv4 address
                packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
            if socket.inet_ntoa(packed[20:24]) == address:
                return name
    return None


def loopback_ifname() -> str:
    """The loopback interface's name, for GLOO_SOCKET_IFNAME."""
    names = [name for _, name in socket.if_nameindex()]
    return "lo" if "lo" in names or not names else names[0]


def accepts(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """Whether something listens on `host`:`port` now: a TCP connection is accepted (a refusal, which
    `answers` counts as the host being there, is False here)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def answers(host: str, port: int, timeout_s: float = 2.0) -> bool:
    """Whether `host` answers on the network: a TCP connection to `port` is accepted, or refused
    (the host sent a reset back). No answer within `timeout_s`, or no route there, is False; so is
    a firewall that drops the port silently, which is why callers probe a port the run uses."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
