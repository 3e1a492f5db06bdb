"""The control panel's inputs, bound to RunConfig: precision, model, batch size, steps, learning
rate, device, and the TF32 / channels_last / compile toggles. Choices the device cannot run are
disabled with a tooltip that says why (from `workbench.machine.capability.unsupported_reason`).

    c = Controls(RunConfig.default()); c.set(precision="bf16", steps=50); cfg = c.config()
"""

from __future__ import annotations

import ipywidgets as widgets
import torch

from ..config import BUILTIN_MODELS, ConfigError, RunConfig, choices, matching_data, require_config
from ..machine.capability import resolve_device, unsupported_reason
from .choices import ChoiceButtons
from .refusing import set_controls
from .sizing import FULL_LABEL

PRECISION_TIPS = {
    "fp32": "full precision: the baseline",
    "bf16": "bfloat16 autocast: fp32's range with fewer mantissa bits, no scaler",
    "fp16": "float16 autocast with a gradient scaler against underflow",
}
TOGGLES = {"tf32": "TF32 matmuls", "channels_last": "channels_last", "compile": "torch.compile"}


def _w() -> dict:
    """Style and a fresh Layout for each input (a shared Layout would tie their sizes together)."""
    return {"style": dict(FULL_LABEL), "layout": widgets.Layout(width="230px")}


class Controls:
    def __init__(self, cfg: RunConfig):
        self.base = require_config(cfg)
        device = resolve_device(cfg.run.device).type
        self.precision = ChoiceButtons(
            list(choices("precision.dtype")), cfg.precision.dtype, "precision", PRECISION_TIPS
        )
        devices = [d for d in choices("run.device") if d != "auto"]  # the widget shows what auto chose
        self.device = ChoiceButtons(
            devices, device, "device", {"cpu": "train on the CPU", "cuda": "train on the GPU"}
        )
        models = list(BUILTIN_MODELS) + ([cfg.model.name] if cfg.model.name not in BUILTIN_MODELS else [])
        self.model = widgets.Dropdown(options=models, value=cfg.model.name, description="model", **_w())
        # Plain number boxes: the config's rules judge them (a bounded box would clamp a typed
        # value in the page without a word); Run shows the config's refusal in one line.
        self.batch_size = widgets.IntText(cfg.loader.batch_size, description="batch size", **_w())
        self.steps = widgets.IntText(cfg.run.steps, description="steps", **_w())
        self.budget_s = widgets.FloatText(
            cfg.run.time_budget_s,
            step=1,
            description="budget (s)",
            **_w(),
            tooltip="seconds of steps a run may take; 0: the steps alone end it",
        )
        self.lr = widgets.FloatText(cfg.optim.lr, step=1e-4, description="learning rate", **_w())
        self.toggles = {
            "tf32": widgets.Checkbox(cfg.precision.tf32, description=TOGGLES["tf32"], indent=False),
            "channels_last": widgets.Checkbox(
                cfg.precision.channels_last, description=TOGGLES["channels_last"], indent=False
            ),
            "compile": widgets.Checkbox(cfg.compile.enabled, description=TOGGLES["compile"], indent=False),
        }
        if not torch.cuda.is_available():
            self.device.set_reason("cuda", "torch sees no CUDA GPU on this machine")
        self._support: tuple[str, RunConfig] | None = None  # (model, config) support is read from
        self.model.observe(lambda _: self.refresh_support(), names="value")
        self.device.observe(lambda _: self.refresh_support())
        self.refresh_support()
        self.widget = widgets.VBox(
            [
                self.precision.widget,
                self.device.widget,
                widgets.HBox([self.model, self.batch_size]),
                widgets.HBox([self.steps, self.budget_s]),
                widgets.HBox([self.lr]),
                widgets.HBox(list(self.toggles.values())),
            ]
        )

    def config(self) -> RunConfig:
        """The RunConfig the widgets describe, built (and so checked) once; ConfigError names a
        bad field."""
        model = self.model.value
        return self.base.replace(
            **{
                "model.name": model,
                "data.name": matching_data(model, self.base.data.name),
                "loader.batch_size": self.batch_size.value,
                "run.steps": self.steps.value,
                "run.time_budget_s": float(self.budget_s.value),
                "optim.lr": float(self.lr.value),
                "run.device": self.device.value,
                "precision.dtype": self.precision.value,
                "precision.tf32": self.toggles["tf32"].value,
                "precision.channels_last": self.toggles["channels_last"].value,
                "compile.enabled": self.toggles["compile"].value,
            }
        )

    def set(self, **values) -> None:
        """Set widgets by name, as a person would: precision, device, model, batch_size, steps,
        budget_s, lr, tf32, channels_last, compile. A value the config refuses is refused here
        (ConfigError, one line) and every widget keeps what it had."""
        controls = {
            name: getattr(self, name)
            for name in ("precision", "device", "model", "batch_size", "steps", "budget_s", "lr")
        }
        set_controls({**controls, **self.toggles}, values, self.config)

    def refresh_support(self) -> None:
        """Grey out what this device and model cannot do, with the reason as the tooltip. Only the
        device and the model decide it, so the config is rebuilt only when the model changes."""
        device = torch.device(self.device.value)
        model = self.model.value
        if self._support is None or self._support[0] != model:
            try:
                self._support = (model, self.base.with_model(model))
            except ConfigError:
                self._support = (model, self.base)
        cfg = self._support[1]
        for option in ("bf16", "fp16"):
            self.precision.set_reason(option, unsupported_reason(cfg, device, option))
        if self.precision.buttons[self.precision.value].disabled:
            self.precision.value = "fp32"
        for option, box in self.toggles.items():
            reason = unsupported_reason(cfg, device, option)
            box.disabled = reason is not None
            box.tooltip = f"unavailable: {reason}" if reason else TOGGLES[option]
            if reason and box.value:
                box.value = False
