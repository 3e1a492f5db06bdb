"""DistributedPanel: start a multi-rank run from a notebook, see the exact torchrun command, watch
every rank live, stop it; when it ends, the supervisor's diagnosis names the failing rank.

    panel = DistributedPanel(RunConfig.default()); panel      # in a notebook cell
    panel.run(nproc=2, steps=100, wait=True)                  # the Run button, from code
"""

from __future__ import annotations

import html
import shlex

import ipywidgets as widgets

from ..config import RunConfig, choices
from ..distributed.launch import RunHandle
from ..machine.capability import resolve_device
from ..machine.fit import max_ranks
from .refusing import RefusingIntSlider, set_controls
from .run_control import RunControl


class DistributedPanel(RunControl):
    """Ranks, backend and steps; Run and Stop; the command; the live per-rank dashboard."""

    def __init__(self, cfg: RunConfig | None = None):
        super().__init__()
        self.base = cfg or RunConfig.default()
        d = self.base.distributed
        most = max_ranks(self.base, resolve_device(self.base.run.device))  # what the launch allows
        self.nproc = RefusingIntSlider(
            value=min(max(d.nproc, 2), most),
            min=1,
            max=most,
            description="ranks",
            why="the ranks this machine runs: workbench.machine.fit.max_ranks",
        )
        self.backend = widgets.Dropdown(
            options=choices("distributed.backend"), value=d.backend, description="backend"
        )
        self.steps = widgets.IntText(
            value=self.base.run.steps, description="steps", layout=widgets.Layout(width="200px")
        )
        self.strategy = widgets.Dropdown(
            options=choices("distributed.strategy"),
            value=d.strategy,
            description="strategy",
            tooltip="ddp: every rank holds the whole model; fsdp: each holds a shard (FSDP2)",
        )
        self.command = widgets.HTML()
        self.widget = widgets.VBox(
            [
                widgets.HBox([self.nproc, self.backend, self.strategy, self.steps]),
                widgets.HBox([self.run_button, self.stop_button]),
                self.status,
                self.command,
                self.dashboard.widget,
            ]
        )

    def config(self) -> RunConfig:
        return self.base.replace(
            **{
                "distributed.nproc": self.nproc.value,
                "distributed.backend": self.backend.value,
                "distributed.strategy": self.strategy.value,
                "run.steps": self.steps.value,
            }
        )

    def apply(self, **settings) -> None:
        """nproc, backend, strategy, steps. A value the config (or the ranks slider: what this
        machine runs) refuses is refused in one line, and every control keeps what it had."""
        controls = {
            "nproc": self.nproc,
            "backend": self.backend,
            "strategy": self.strategy,
            "steps": self.steps,
        }
        set_controls(controls, settings, self.config)

    def started(self, cfg: RunConfig, handle: RunHandle) -> None:
        how = (
            (
                "a spare took the run: started before Run with this command, it was handed the run "
                "folder (run.warm_worker=false starts cold)"
            )
            if handle.warm
            else "started cold"
        )
        self.command.value = (
            f"<details open><summary>the exact command that ran ({html.escape(how)})"
            "</summary><pre style='white-space:pre-wrap'>"
            f"{html.escape(shlex.join(handle.command))}</pre></details>"
        )
