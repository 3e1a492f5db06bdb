"""A run into TensorBoard: its figures per step as scalars, its settings and summary as text.

workbench runs export RUN_DIR --to tensorboard tb/      then   tensorboard --logdir tb/
"""

from __future__ import annotations

import json
from pathlib import Path

from .base import final_figures, needs, scalars_of


class TensorBoardSink:
    """Sends a run to TensorBoard: its step figures as scalars, its settings and summary as text. A
    missing tensorboard package is refused here, in one line.

    :param log_dir: the folder whose subfolder `name` gets the run's event files.
    :param name: the run's subfolder of `log_dir`; None: the run's label, else "run".
    """

    def __init__(self, log_dir: str | Path, name: str | None = None):
        self.root, self.name = Path(log_dir), name
        self._tb = needs("torch.utils.tensorboard", "tensorboard", "TensorBoard")  # refused here
        self._writer = None

    def start(self, record: dict) -> None:
        self._writer = self._tb.SummaryWriter(str(self.root / (self.name or record.get("label") or "run")))
        params = record.get("params") or {}
        rows = "\n".join(f"| {k} | {json.dumps(v)} |" for k, v in sorted(params.items()))
        self._writer.add_text("config", f"| setting | value |\n|---|---|\n{rows}" if rows else "(none)")
        if record.get("command"):
            self._writer.add_text("command", " ".join(record["command"]))

    def step(self, step: int, figures: dict) -> None:
        for key, value in scalars_of(figures).items():
            self._writer.add_scalar(key, value, step)

    def finish(self, summary: dict) -> None:
        steps = int(summary.get("steps") or 0)
        for key, value in final_figures(summary).items():
            self._writer.add_scalar(f"summary/{key}", value, steps)
        words = {k: v for k, v in summary.items() if isinstance(v, str) and k != "traceback"}
        words.update({f"tag {k}": v for k, v in (summary.get("tags") or {}).items()})
        self._writer.add_text("summary", "\n\n".join(f"**{k}**: {v}" for k, v in sorted(words.items())))
        self._writer.close()
