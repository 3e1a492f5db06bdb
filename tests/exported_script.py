"""Reading an exported train.py and its runs: its losses beside the workbench's run of the same
config, the script imported as a module, a runner that blocks every import but torch's and the
standard library's, and a static check for names the assembly left undefined."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from workbench.events import read_events

# The script may only import torch and the standard library; this runs it with the rest blocked.
BLOCKED_RUNNER = """import runpy, sys
for name in ("workbench", "sklearn", "numpy", "pandas"):
    sys.modules[name] = None  # any import of these now fails
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def workbench_losses(run_dir, rank=0):
    return [r["loss"] for r in read_events(run_dir) if r["event"] == "step" and r["rank"] == rank]


def script_losses(metrics_dir, rank=0):
    lines = (Path(metrics_dir) / f"rank{rank}.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines]


def import_script(path: Path):
    spec = importlib.util.spec_from_file_location(f"exported_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up here
    spec.loader.exec_module(module)
    return module


def run_blocked(export_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """The export's train.py run from its folder with BLOCKED_RUNNER (written beside the folder),
    its output captured."""
    runner = Path(export_dir).parent / "blocked.py"
    runner.write_text(BLOCKED_RUNNER)
    return subprocess.run(
        [sys.executable, str(runner), "train.py", *args],
        cwd=export_dir,
        capture_output=True,
        text=True,
        timeout=180,
    )


UNDEFINED = ("F821", "F822", "F823")  # a name used but never defined, exported, or bound in time


def undefined_names(source: str, name: str) -> list[str]:
    """What a static check finds undefined in `source`: the generated script is assembled from the
    package's definitions, and one left behind shows only when its line runs."""
    found = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache", "--select", ",".join(UNDEFINED)]
        + ["--output-format", "concise", "--stdin-filename", name, "-"],
        input=source,
        capture_output=True,
        text=True,
    )
    return [line for line in found.stdout.splitlines() if any(code in line for code in UNDEFINED)]
