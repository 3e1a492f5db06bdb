"""The Hugging Face `Trainer` in the workbench: one callback, and every optimizer step is a step
record (timed from `on_step_begin` to `on_step_end` after a device sync, samples = the per-device
batch times the accumulation), the loss wherever the Trainer logs it (`logging_steps=1` charts
every step's), the TrainingArguments as the run's settings, and the time budget of
`workbench ab --cmd` honoured by stopping training.

    from workbench.integrations.hf import WorkbenchCallback
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[WorkbenchCallback()])
"""

from __future__ import annotations

import time

from transformers import TrainerCallback

from ..tracking import track

LOGGED_LOSS = "loss"  # the Trainer's own name for the loss in its logs


def precision_of(args) -> str:
    return "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else "fp32"


class WorkbenchCallback(TrainerCallback):
    """Tracks the Trainer's run; `run_dir` and the other arguments are `workbench.track`'s.

    :param config: the settings recorded as the run's parameters; None: the Trainer's TrainingArguments.
    :param run_dir: the run folder, new or empty; None: $WORKBENCH_RUN_DIR, else a fresh one in the run store.
    """

    def __init__(self, config=None, run_dir=None, **track_kwargs):
        self.config, self.run_dir, self.track_kwargs = config, run_dir, track_kwargs
        self.run = None
        self._t0 = self._wait = None
        self._pending: dict | None = None  # the step just ended, written once its loss is logged
        self._loss = None

    def on_train_begin(self, args, state, control, **kwargs):
        if self.run is None:
            settings = {k: v for k, v in args.to_dict().items() if not k.startswith("_")}
            self.run = track(
                config=self.config if self.config is not None else settings,
                run_dir=self.run_dir,
                exit_at_budget=False,
                **{"precision": precision_of(args), "steps": state.max_steps or None, **self.track_kwargs},
            )

    def on_step_begin(self, args, state, control, **kwargs):
        self._flush()
        self._t0, self._wait = self.run.begin_step()

    def on_step_end(self, args, state, control, **kwargs):
        self.run.sync()
        samples = args.per_device_train_batch_size * args.gradient_accumulation_steps
        self._pending = {"seconds": time.perf_counter() - self._t0, "samples": samples, "wait_s": self._wait}
        if self.run.should_stop:
            control.should_training_stop = True

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._pending is not None and logs and LOGGED_LOSS in logs:
            self._loss = logs[LOGGED_LOSS]
        self._flush()
        if self.run is not None and self.run.should_stop:
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        self._flush()
        if self.run is not None:
            self.run.finish()

    def _flush(self) -> None:
        if self._pending is not None:
            pending, loss, self._pending, self._loss = self._pending, self._loss, None, None
            self.run.add_step(**pending, loss=loss)
