"""A run into MLflow: its settings as parameters, its figures per step as metrics, its final
figures as metrics, its status as the run's, its words and an A/B's verdicts as tags.

    workbench runs export RUN_DIR --to mlflow sqlite:///mlflow.db     (or a folder: a file store)

Live, metrics are sent in batches about once a second, so a step never waits on the store.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

from ..config import ConfigError
from .base import final_figures, needs, scalars_of

EXPERIMENT = "workbench"
FLUSH_S = 1.0
STATUS = {"completed": "FINISHED", "diverged": "FINISHED", "stopped": "KILLED"}  # else FAILED


SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "file", "databricks")
CONNECT_S = 3.0  # a tracking server that does not accept a connection in this long is not there


def tracking_uri(target: str) -> str:
    """What MLflow is given, checked before anything is written: a database or server URI as it
    is (a server must accept a connection), `file:DIR` or a folder as a file store (absolute); a
    malformed URI is a one-line ConfigError naming what is allowed."""
    if target.startswith("file:") and "://" not in target:  # file:DIR names the folder DIR
        target = target[len("file:") :]
    if "://" not in target:
        if not target:
            raise ConfigError("mlflow target '': name a folder or a tracking URI (sqlite:///mlflow.db)")
        return Path(target).absolute().as_uri()
    scheme, _, rest = target.partition("://")
    if scheme.split("+")[0] not in SCHEMES:
        raise ConfigError(
            f"mlflow tracking URI {target!r}: its scheme {scheme!r} is not one MLflow stores to; "
            f"use {', '.join(s + '://' for s in SCHEMES)}, or a folder"
        )
    if scheme == "sqlite" and not rest.lstrip("/"):
        raise ConfigError(f"mlflow tracking URI {target!r} names no database file: sqlite:///PATH")
    if scheme in ("http", "https"):
        _check_server(target)
    return target


def _check_server(uri: str) -> None:
    """A tracking server's address parses and accepts a connection, or a one-line ConfigError."""
    try:
        url = urlsplit(uri)
        host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    except ValueError as e:
        raise ConfigError(f"mlflow tracking URI {uri!r} is malformed: {e}") from None
    if not host:
        raise ConfigError(f"mlflow tracking URI {uri!r} names no host: http://HOST:PORT")
    try:
        socket.create_connection((host, port), timeout=CONNECT_S).close()
    except OSError as e:
        raise ConfigError(
            f"the MLflow server at {uri!r} does not answer ({e.strerror or type(e).__name__}): "
            "start it (mlflow server) or export to a folder or sqlite:///mlflow.db"
        ) from None


class MlflowSink:
    """Sends a run to MLflow (see the module). A missing mlflow package, a malformed target or a
    tracking server that does not answer is refused here, in one line.

    :param target: a tracking URI (sqlite:///mlflow.db, http://HOST:PORT, ...), or a folder (or file:DIR)
        for a file store.
    :param experiment: the experiment the run goes into, made when it does not exist.
    :param name: the MLflow run's name; None: the run's label.
    """

    def __init__(self, target: str, experiment: str = EXPERIMENT, name: str | None = None):
        self.uri, self.experiment, self.name = tracking_uri(target), experiment, name
        self._client = self._run_id = None
        self._pending: list = []
        self._flushed = time.monotonic()
        needs("mlflow", "mlflow", "MLflow")  # refused here, before a run starts

    def start(self, record: dict) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        if self.uri.startswith("file:"):  # the user named a folder: MLflow's file store, asked for
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self._client = MlflowClient(tracking_uri=self.uri)
        found = self._client.get_experiment_by_name(self.experiment)
        experiment = found.experiment_id if found else self._client.create_experiment(self.experiment)
        run = self._client.create_run(experiment, run_name=self.name or record.get("label"))
        self._run_id = run.info.run_id
        params = [Param(k[:250], str(v)[:6000]) for k, v in (record.get("params") or {}).items()]
        for i in range(0, len(params), 100):
            self._client.log_batch(self._run_id, params=params[i : i + 100])
        if record.get("command"):
            self._client.set_tag(self._run_id, "command", " ".join(record["command"])[:5000])

    def step(self, step: int, figures: dict) -> None:
        from mlflow.entities import Metric

        t = int(time.time() * 1000)
        self._pending += [Metric(k, v, t, step) for k, v in scalars_of(figures).items()]
        if time.monotonic() - self._flushed >= FLUSH_S:
            self._flush()

    def _flush(self) -> None:
        for i in range(0, len(self._pending), 1000):
            self._client.log_batch(self._run_id, metrics=self._pending[i : i + 1000])
        self._pending = []
        self._flushed = time.monotonic()

    def finish(self, summary: dict) -> None:
        from mlflow.entities import Metric, RunTag

        t, steps = int(time.time() * 1000), int(summary.get("steps") or 0)
        self._pending += [Metric(f"summary.{k}", v, t, steps) for k, v in final_figures(summary).items()]
        self._flush()
        tags = {k: v for k, v in summary.items() if isinstance(v, str) and k != "traceback"}
        tags.update(summary.get("tags") or {})
        self._client.log_batch(self._run_id, tags=[RunTag(k[:250], str(v)[:5000]) for k, v in tags.items()])
        self._client.set_terminated(self._run_id, STATUS.get(summary.get("status"), "FAILED"))

    @property
    def run_id(self) -> str | None:
        return self._run_id
