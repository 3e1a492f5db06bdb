"""Loopback networking shared by the launcher, the torchrun agent and the ranks: free ports, "is
this address loopback", and listening sockets bound to exactly one address (stdlib only).

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


def listen_fd(host: str, port: int) -> int:
    """A listening socket on exactly host:port, handed over as a bare fd (the store closes it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(512)
    return sock.detach()


def loopback_ifname() -> str:
    """The loopback interface's name, for GLOO_SOCKET_IFNAME."""
    names = [name for _, name in socket.if_nameindex()]
    return "lo" if "lo" in names or not names else names[0]
