"""The noise guard: what other processes did to this machine while something was measured.

    meter = ContentionMeter(root_pid)      # the measured work is root_pid and its descendants
    ... run or measure ...
    meter.read()   # {'other_cpu_cores': 1.2, 'steal_frac': 0.0, 'load_avg_1m': 2.4, 'cores': 2, ...}

`other_cpu_cores` is the CPU time the whole machine spent (from /proc/stat) minus what the measured
process tree spent (psutil, including children it has reaped), per second of wall time: the cores
other programs held. `steal_frac` is the share of time the hypervisor gave to other guests.
A result taken while another process held a quarter of a core or more, or with steal above 5 %,
is flagged busy: on a machine this small that changes timings by more than effects of interest.
"""

from __future__ import annotations

import os
import time

import psutil

from .cpu import usable_cores

BUSY_CORES = 0.25  # other programs' cores at which a measurement is flagged busy
BUSY_STEAL = 0.05
# /proc/stat counts in clock ticks (10 ms): a window much shorter than this cannot show a quarter
# of a core held by others
MIN_WINDOW_S = 0.2
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def run_tree_pid() -> int:
    """The process whose tree is this run (the supervisor sets WORKBENCH_TREE_PID for its child;
    a worker started by hand is its own tree): CPU time outside it is other programs' work."""
    return int(os.environ.get("WORKBENCH_TREE_PID") or os.getpid())


def system_cpu() -> tuple[float, float, float]:
    """(busy, steal, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0, 0.0
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    busy = user + nice + system + irq + softirq
    return busy / _TICK, steal / _TICK, (busy + idle + iowait + steal) / _TICK


def tree_cpu(root_pid: int) -> float:
    """CPU seconds of a process, its live descendants and the children they have reaped."""
    total = 0.0
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


class ContentionMeter:
    """Reads the machine and the measured tree at start and at each `read()`."""

    def __init__(self, root_pid: int | None = None, also: tuple[int, ...] = ()):
        """`also`: more process trees that are part of the measured work (the servers a load drives)."""
        self.root_pid = root_pid or os.getpid()
        self.roots = (self.root_pid, *also)
        self.restart()

    def _own(self) -> float:
        return sum(tree_cpu(pid) for pid in self.roots)

    def restart(self) -> None:
        self._t0 = time.monotonic()
        self._sys0 = system_cpu()
        self._tree0 = self._own()

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def read_over(self, seconds: float = MIN_WINDOW_S) -> dict:
        """`read()`, first waiting out what is left of a window of `seconds` since the start: a
        measurement of a few milliseconds is judged by what others did around it."""
        left = seconds - self.elapsed()
        if left > 0:
            time.sleep(left)
        return self.read()

    def read(self) -> dict:
        """What other work did since the start (or the last restart)."""
        wall = max(time.monotonic() - self._t0, 1e-9)
        busy, steal, total = system_cpu()
        d_busy, d_steal, d_total = busy - self._sys0[0], steal - self._sys0[1], total - self._sys0[2]
        own = self._own() - self._tree0
        other = max(0.0, (d_busy - own) / wall)
        steal_frac = d_steal / d_total if d_total > 0 else 0.0
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        return {
            "other_cpu_cores": round(other, 3),
            "steal_frac": round(steal_frac, 4),
            "load_avg_1m": round(load, 2) if load is not None else None,
            "own_cpu_cores": round(own / wall, 3),
            "cores": usable_cores(),
            "wall_s": round(wall, 3),
            "busy": is_busy(other, steal_frac),
        }


def is_busy(other_cpu_cores: float | None, steal_frac: float | None = 0.0) -> bool:
    return (other_cpu_cores or 0.0) >= BUSY_CORES or (steal_frac or 0.0) >= BUSY_STEAL


def steal_text(steal_frac: float | None) -> str:
    """What the hypervisor took, when it was enough to flag a measurement busy ('' otherwise)."""
    return f"the hypervisor took {steal_frac:.0%} of the time" if (steal_frac or 0.0) >= BUSY_STEAL else ""


def busy_sentence(c: dict | None) -> str:
    """The warning a table, a chart or the CLI shows for a busy reading ('' when quiet)."""
    if not c or not c.get("busy"):
        return ""
    parts = [
        f"another process used {c['other_cpu_cores']:.1f} cores"
        if c.get("other_cpu_cores", 0) >= BUSY_CORES
        else "",
        steal_text(c.get("steal_frac")),
    ]
    return " and ".join(p for p in parts if p) + " during this measurement: the comparison is unreliable"
