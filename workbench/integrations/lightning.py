"""A Lightning `Trainer` in the workbench: one callback, and every training batch is a step record
(timed from `on_train_batch_start` to `on_train_batch_end` after a device sync, its loss from
`training_step`'s output, its samples from the batch), the module's hyperparameters as the run's
settings, an exception recorded as a rank's is, and the time budget of `workbench ab --cmd`
honoured by stopping the Trainer.

    from workbench.integrations.lightning import WorkbenchCallback
    trainer = L.Trainer(max_epochs=3, callbacks=[WorkbenchCallback()])
"""

from __future__ import annotations

import time

import torch
from lightning.pytorch.callbacks import Callback

from ..tracking import track

RETURNED_LOSS = "loss"  # where Lightning finds the loss in a dict training_step returns


def samples_in(batch) -> int | None:
    """The samples in a batch: the first dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else None
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for part in batch:
            found = samples_in(part)
            if found:
                return found
    return None


def loss_in(outputs):
    if isinstance(outputs, dict):
        return outputs.get(RETURNED_LOSS)
    return outputs if isinstance(outputs, torch.Tensor) else None


class WorkbenchCallback(Callback):
    """Tracks the Trainer's run; `run_dir` and the other arguments are `workbench.track`'s.

    :param config: the settings recorded as the run's parameters; None: the LightningModule's hyperparameters.
    :param run_dir: the run folder, new or empty; None: $WORKBENCH_RUN_DIR, else a fresh one in the run store.
    """

    def __init__(self, config=None, run_dir=None, **track_kwargs):
        self.config, self.run_dir, self.track_kwargs = config, run_dir, track_kwargs
        self.run = None
        self._t0 = self._wait = None

    def on_train_start(self, trainer, pl_module):
        if self.run is None:
            settings = self.config if self.config is not None else dict(pl_module.hparams)
            steps = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
            self.run = track(
                config=settings,
                run_dir=self.run_dir,
                exit_at_budget=False,
                **{"precision": str(trainer.precision), "steps": steps, **self.track_kwargs},
            )

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._t0, self._wait = self.run.begin_step()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.run.sync()
        self.run.add_step(
            time.perf_counter() - self._t0,
            samples=samples_in(batch),
            loss=loss_in(outputs),
            wait_s=self._wait,
        )
        if self.run.should_stop:
            trainer.should_stop = True

    def on_train_end(self, trainer, pl_module):
        if self.run is not None:
            self.run.finish()

    def on_exception(self, trainer, pl_module, exception):
        if self.run is not None:
            self.run.end(exception)
