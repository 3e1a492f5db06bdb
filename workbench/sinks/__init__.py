"""Where a run's figures flow out to the tools people keep their runs in: TensorBoard and MLflow.

    from workbench.sinks import TensorBoardSink, MlflowSink
    sinks = [TensorBoardSink("tb"), MlflowSink("sqlite:///mlflow.db")]
    run = workbench.track(config=cfg, sinks=sinks)
    # afterwards
    export_run("runs/20261205-101500_train", MlflowSink("sqlite:///mlflow.db"))

A sink gets the run's record once (its settings become parameters), every step record as it
comes (loss, samples/s, step time, data wait, memory, MFU), and the summary at the end (final
figures; the status; an A/B's verdicts as tags). Live, only rank 0 sends. The libraries are
optional: a sink whose library is missing is refused in one line saying what to install.
"""

from __future__ import annotations

from .base import SCALARS, Sink, scalars_of  # noqa: F401
from .mlflow import MlflowSink  # noqa: F401
from .replay import export_run, sink_for  # noqa: F401
from .tensorboard import TensorBoardSink  # noqa: F401

__all__ = ["Sink", "TensorBoardSink", "MlflowSink", "export_run", "sink_for", "SCALARS", "scalars_of"]
