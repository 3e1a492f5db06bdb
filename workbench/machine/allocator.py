"""The memory allocator a run's processes start with, chosen before they start (LD_PRELOAD is read
once, at a process's start).

glibc's malloc serves block-sized buffers (FSDP's gathered units and reduce-scatter inputs, wide
activations) from its heaps once its dynamic mmap threshold has risen past them, and the freed pages
stay resident: a rank's resident set then exceeds what its tensors hold, and FSDP, chosen to hold
less, measures more than DDP. tcmalloc's size classes reuse such buffers, so the resident set stays
near what the tensors need. Which of the two runs faster is measured, not assumed:
`python -m tools.bench allocator`.

    allocator_env("auto")      # {'LD_PRELOAD': '/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4', ...}
    allocator_in_use()         # 'tcmalloc' or 'system', as this process runs
"""

from __future__ import annotations

import functools
import os
import sysconfig
from pathlib import Path

TCMALLOC_FILES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")
INSTALL_HINT = "Debian/Ubuntu: apt install libtcmalloc-minimal4"
# tcmalloc writes a line to stderr for every allocation over 1 GiB unless told otherwise
QUIET = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(2**40)}


@functools.lru_cache(maxsize=1)
def tcmalloc_path() -> str | None:
    """Where tcmalloc's shared library is on this machine, or None."""
    arch = sysconfig.get_config_var("MULTIARCH") or ""
    folders = [f"/usr/lib/{arch}" if arch else "", "/usr/lib64", "/usr/lib", "/usr/local/lib"]
    for folder in filter(None, folders):
        for name in TCMALLOC_FILES:
            path = Path(folder, name)
            if path.is_file():
                return str(path)
    return None


def resolved(choice: str) -> str:
    """'tcmalloc' or 'system': what `choice` (run.allocator) gives on this machine."""
    if choice == "auto":
        return "tcmalloc" if tcmalloc_path() else "system"
    return choice


def refusal(choice: str) -> str | None:
    """Why `choice` cannot run here, in one line, or None."""
    if choice == "tcmalloc" and not tcmalloc_path():
        return (
            f"run.allocator 'tcmalloc' is not installed on this machine ({INSTALL_HINT}); "
            "'auto' uses it where it is, 'system' keeps the C library's malloc"
        )
    return None


def allocator_env(choice: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """What a process's environment needs to start with `choice`: tcmalloc put first in LD_PRELOAD
    (a person's own preloads kept after it), or nothing for the system's."""
    if resolved(choice) != "tcmalloc" or not tcmalloc_path():
        return {}
    preload = (base if base is not None else os.environ).get("LD_PRELOAD", "")
    kept = [p for p in preload.replace(":", " ").split() if "tcmalloc" not in p]
    return {"LD_PRELOAD": " ".join([tcmalloc_path(), *kept]), **QUIET}


def rule_text(choice: str) -> str:
    """The allocator rule in words, for a reader outside the workbench."""
    return (
        f"The memory allocator follows run.allocator ({choice!r}): 'auto' starts the process on "
        f"tcmalloc where it is installed ({INSTALL_HINT}) and on the C library's malloc elsewhere, "
        "'tcmalloc' requires it, 'system' keeps malloc. tcmalloc is loaded through LD_PRELOAD, so "
        "the script starts itself again once with it; it prints the allocator it runs on."
    )


def allocator_in_use() -> str:
    """'tcmalloc' when this process runs on it, else 'system' (read from its own mappings)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "system"
    return "tcmalloc" if "libtcmalloc" in maps else "system"
