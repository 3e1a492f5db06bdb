"""The serving lab's bounds, names and settings, in one place and without torch, so a command
refuses a bad flag at once (an exported serve.py copies this module's code as it is)."""

import ipaddress
from dataclasses import dataclass

from ..config import ConfigError

VARIANTS = ("eager", "compiled", "bf16", "int8", "pruned", "onnx")  # what serving.served builds
PRUNE_AMOUNT = 0.5  # the pruned variant's default share of each hidden layer's units removed

MAX_SAMPLES = 256  # samples in one request: a bigger one is refused (413), not queued
MAX_BODY = 8 * 2**20  # bytes of one request's body
MAX_WAIT_MS = 1000.0  # the longest a batch may wait to fill
MAX_REQUESTS = 10_000  # per load level: a load run is bounded in count as well as in time
MAX_CONCURRENCY = 1024  # clients of one closed-loop level


LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Settings:
    host: str = LOOPBACK
    port: int = 8700
    max_batch: int = 1  # 1: no batching
    max_wait_ms: float = 0.0
    token: str | None = None

    def check(self) -> "Settings":
        """One line naming the flag, its value and what is allowed."""
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be 0-65535 (0: any free port), got {self.port}")
        if not 1 <= self.max_batch <= MAX_SAMPLES:
            raise ConfigError(f"--max-batch must be 1-{MAX_SAMPLES} (1: no batching), got {self.max_batch}")
        if not 0 <= self.max_wait_ms <= MAX_WAIT_MS:
            raise ConfigError(f"--max-wait-ms must be 0-{MAX_WAIT_MS:g}, got {self.max_wait_ms:g}")
        try:
            loopback = ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            raise ConfigError(f"--host must be an IP address, got {self.host!r}") from None
        if not loopback and not self.token:
            raise ConfigError(
                f"--host {self.host} serves beyond this machine: give a --token (clients send "
                "Authorization: Bearer TOKEN), or serve on 127.0.0.1"
            )
        return self

    def batching(self) -> str:
        """What a server says of its batching."""
        if self.max_batch > 1:
            return f"up to {self.max_batch} samples, waiting at most {self.max_wait_ms:g} ms"
        return "off (one forward a request)"

    def about(self, threads_why: str = "") -> dict:
        """What a server's /health says of how it serves: its batching and, when chosen, its threads."""
        about = {"batching": self.batching(), "max_batch": self.max_batch, "max_wait_ms": self.max_wait_ms}
        if threads_why:
            about["threads"] = threads_why
        return about
