"""The serving lab's bounds and names, in one place and without torch, so a command refuses a bad
flag at once."""

VARIANTS = ("eager", "compiled", "bf16", "int8")  # what workbench.serving.served builds

MAX_SAMPLES = 256  # samples in one request: a bigger one is refused (413), not queued
MAX_BODY = 8 * 2**20  # bytes of one request's body
MAX_WAIT_MS = 1000.0  # the longest a batch may wait to fill
MAX_REQUESTS = 10_000  # per load level: a load run is bounded in count as well as in time
MAX_CONCURRENCY = 1024  # clients of one closed-loop level
