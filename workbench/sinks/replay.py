"""A finished (or running) run folder sent to a sink afterwards, read as every reader reads it:
its record or config (nothing it names is imported), rank 0's step records, its summary.

    workbench runs export RUN_DIR [RUN_DIR ...] --to tensorboard DIR
    workbench runs export RUN_DIR --to mlflow sqlite:///mlflow.db
"""

from __future__ import annotations

from pathlib import Path

from ..config import ConfigError
from ..events import EVENT, RANK, STEP, STEP_NUMBER, read_events_checked
from ..runfolder import RunFolder
from ..runstore import read_summary
from .base import Sink

KINDS = ("tensorboard", "mlflow")


def sink_for(kind: str, target: str, name: str | None = None) -> Sink:
    """A sink by its name on the command line, or a one-line refusal.

    :param kind: "tensorboard" or "mlflow"; anything else is a ConfigError.
    :param target: TensorBoard's log folder, or MLflow's tracking URI or folder.
    :param name: the run's name there; None: the run's label.
    """
    from .mlflow import MlflowSink
    from .tensorboard import TensorBoardSink

    if kind == "tensorboard":
        return TensorBoardSink(target, name)
    if kind == "mlflow":
        return MlflowSink(target, name=name)
    raise ConfigError(f"--to {kind!r} is not a place runs go; one of {', '.join(KINDS)}")


def record_of(run_dir: Path) -> dict:
    """What a sink starts from: a tracked script's record, or a workbench run's config as its
    settings (flattened, as the tracker records a script's)."""
    from ..tracking.record import flatten

    folder = RunFolder(run_dir)
    if folder.is_script():
        return folder.script()
    shape = folder.shape()
    return {
        "label": Path(run_dir).name,
        "params": flatten(folder.config_data()),
        "model": shape["model"],
        "precision": shape["precision"],
        "tags": {},
    }


class Exported(int):
    """The steps sent (an int), with `skipped`: a line for each damaged event line left out."""

    skipped: list[str]


def export_run(run_dir: str | Path, sink: Sink) -> Exported:
    """Send one run to `sink`; returns the steps sent, and names the damaged lines left out.

    :param run_dir: the run folder, finished or still running; one that holds no run is a ConfigError.
    :param sink: where the run goes: its record, rank 0's step records, then its summary.
    """
    run_dir = Path(run_dir)
    if not RunFolder(run_dir).holds_run():
        raise ConfigError(f"RUN_DIR {str(run_dir)!r} is not a run folder; `workbench runs` lists them")
    record = record_of(run_dir)
    sink.start(record)
    records, problems = read_events_checked(run_dir)
    steps = [r for r in records if r.get(EVENT) == STEP and r.get(RANK, 0) == 0]
    for r in steps:
        sink.step(r[STEP_NUMBER], r)
    sink.finish({**read_summary(run_dir), "tags": record.get("tags") or {}})
    sent = Exported(len(steps))
    sent.skipped = problems
    return sent
