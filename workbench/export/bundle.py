"""Write an export folder: the config as JSON, a standalone `train.py` (torch only), `commands.md`
and `run.sh` with the exact single- and multi-node torchrun commands, and `job.slurm`; a user's
model and Dataset factories travel with it, with the local modules they import.

    from workbench.export import export
    export(run_dir_or_config, "exported/")        # or: workbench export --run RUN_DIR --to exported/
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ..config import ConfigError, RunConfig
from ..disk import disk_message
from ..runfolder import CONFIG, JOB_FILE, RunFolder
from ..runstore import read_summary
from ..distributed.slurm import shell_word
from . import launch_commands
from .script import DATA_FILE, save_digits, script_source
from .serve_script import serve_source
from .user_code import copy_user_code

FILES = (
    CONFIG,
    "train.py",
    "serve.py",
    "commands.md",
    "run.sh",
    JOB_FILE,
)  # config and batch file named as a run's


@dataclass
class Export:
    """What an export wrote, and the commands it recommends."""

    dir: Path
    files: list[Path] = field(default_factory=list)
    single_node: list[str] = field(default_factory=list)
    multi_node: list[str] = field(default_factory=list)
    needs: list[str] = field(default_factory=list)  # packages your code imports besides torch
    warnings: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        names = ", ".join(str(p.relative_to(self.dir)) for p in self.files)
        needs = (
            f"\n  your code also imports: {', '.join(self.needs)} (install them where it runs)"
            if self.needs
            else ""
        )
        notes = "".join(f"\n  warning: {w}" for w in self.warnings)
        return (
            f"exported to {self.dir}: {names}\n  one node:   {shlex.join(self.single_node)}\n"
            f"  multi-node: {shlex.join(self.multi_node)}{needs}{notes}"
        )


def resolve_config(source) -> RunConfig:
    """A RunConfig, a run folder, or a config JSON file."""
    if isinstance(source, RunConfig):
        return source
    path = Path(source)
    if path.is_dir():
        folder = RunFolder(path)
        if not folder.holds_run():
            raise ConfigError(
                f"run folder {str(path)!r} has no {CONFIG}; give a run folder "
                "(one from `workbench runs`) or a config file"
            )
        return folder.config()
    if path.is_file():
        return RunConfig.from_file(path)
    raise ConfigError(f"{str(path)!r} does not exist; give a run folder or a config JSON file")


def _run_sh(cfg: RunConfig, nodes: int, port: int) -> str:
    one = shlex.join(launch_commands.single_node(cfg, port=port))
    many = " ".join(
        shell_word(a) for a in launch_commands.multi_node(cfg, nodes, head="$HEAD_NODE", port=port)
    )
    return f"""#!/bin/bash
# Run the exported training script.
#   ./run.sh                     this machine, as the run was
#   HEAD_NODE=host ./run.sh      on each of {nodes} nodes (HEAD_NODE hosts the rendezvous)
set -euo pipefail
cd "$(dirname "$0")"
if [ -z "${{HEAD_NODE:-}}" ]; then
  exec {one} "$@"
else
  exec {many} "$@"
fi
"""


def run_warnings(source) -> list[str]:
    """A run folder that did not complete is still exported (its config is what matters), but says so."""
    if isinstance(source, RunConfig) or not Path(source).is_dir():
        return []
    s = read_summary(source)
    if s.get("status") == "completed":
        return []
    why = f": {s['message']}" if s.get("message") else ""
    return [
        f"run {str(source)!r} has status {s.get('status')!r}, not completed{why}; the export "
        "holds its config, not a finished run"
    ]


def export(
    source,
    to_dir,
    *,
    nodes: int | None = None,
    port: int = launch_commands.DEFAULT_PORT,
    overwrite: bool = False,
) -> Export:
    """Write the export files for `source` (RunConfig, run folder or config file) into `to_dir`."""
    try:
        return _export(source, Path(to_dir), nodes, port, overwrite)
    except OSError as e:
        raise ConfigError(disk_message(to_dir, e, "writing the export")) from None


def _export(source, to_dir: Path, nodes: int | None, port: int, overwrite: bool) -> Export:
    cfg = resolve_config(source)
    if cfg.run.resume_from:  # the export trains from step 0, and travels without that folder
        cfg = cfg.replace(**{"run.resume_from": ""})
    nodes = nodes if nodes is not None else launch_commands.default_nodes(cfg)
    if nodes < 2:
        raise ConfigError(f"nodes must be >= 2 for the multi-node command, got {nodes}")
    if not 0 < port < 65536:
        raise ConfigError(f"port must be in 1..65535, got {port}")
    if to_dir.exists() and not to_dir.is_dir():
        raise ConfigError(f"--to {str(to_dir)!r} is a file; give a folder")
    clash = [n for n in FILES if (to_dir / n).exists()]
    if clash and not overwrite:
        raise ConfigError(
            f"{str(to_dir)!r} already holds an export ({', '.join(clash)}); "
            "choose a new folder or pass overwrite=True (--force)"
        )
    to_dir.mkdir(parents=True, exist_ok=True)

    result = Export(
        to_dir,
        single_node=launch_commands.single_node(cfg, port=port),
        multi_node=launch_commands.multi_node(cfg, nodes, port=port),
        warnings=run_warnings(source),
    )
    specs, carried, result.needs = copy_user_code(cfg, to_dir)  # your code and its local modules
    result.files += carried
    if cfg.data.name == "digits":
        save_digits(cfg, to_dir / DATA_FILE)
        result.files.append(to_dir / DATA_FILE)
    # An export holds its config under a run folder's name, naming the copies beside it (paths
    # relative to the export folder, where its commands run), never the originals.
    cfg.replace(**specs).save(to_dir / CONFIG)
    launched = (
        RunFolder(source).launch() if isinstance(source, (str, Path)) and Path(source).is_dir() else None
    )
    recorded = (launched or {}).get("threads")  # the run's own choice, where it came from a run
    texts = {
        "train.py": script_source(cfg, specs, recorded),
        "serve.py": serve_source(),
        "commands.md": launch_commands.commands_markdown(cfg, nodes, port),
        "run.sh": _run_sh(cfg, nodes, port),
        JOB_FILE: launch_commands.slurm_job(cfg, nodes, port),
    }
    for name, text in texts.items():
        (to_dir / name).write_text(text)
    for name in ("run.sh", "train.py", "serve.py", JOB_FILE):
        os.chmod(to_dir / name, 0o755)
    result.files[:0] = [to_dir / n for n in FILES]
    return result
