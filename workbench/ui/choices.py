"""ChoiceButtons: a row of toggle buttons acting as one choice, where each option can be disabled
with a tooltip that says why (ipywidgets' ToggleButtons cannot disable a single option).

    c = ChoiceButtons(["fp32", "bf16", "fp16"], "fp32"); c.disable("bf16", "no bf16 here")
"""

from __future__ import annotations

from typing import Callable

import ipywidgets as widgets

from ..config import ConfigError, shown


class ChoiceButtons:
    def __init__(
        self, options: list[str], value: str, description: str = "", tooltips: dict[str, str] | None = None
    ):
        self.options, self.description = list(options), description
        self._check(value)
        self.buttons = {
            o: widgets.ToggleButton(description=o, value=o == value, layout=widgets.Layout(width="72px"))
            for o in options
        }
        self._base_tips = dict(tooltips or {})
        self._callbacks: list[Callable[[str], None]] = []
        self._value = value
        for o, b in self.buttons.items():
            b.tooltip = self._base_tips.get(o, o)
            b.observe(lambda ch, o=o: self._clicked(o, ch["new"]), names="value")
        label = widgets.Label(description, layout=widgets.Layout(width="90px"))
        self.widget = widgets.HBox([label, *self.buttons.values()])

    @property
    def value(self) -> str:
        return self._value

    @value.setter
    def value(self, new: str) -> None:
        self._check(new)
        if self.buttons[new].disabled:
            raise ConfigError(
                f"{self.description or 'value'}={new!r} is not available here: {self.buttons[new].tooltip}"
            )
        self._select(new)

    def _check(self, value) -> None:
        if value not in self.options:
            raise ConfigError(
                f"{self.description or 'value'}={shown(value)} is not allowed: one "
                f"of {', '.join(self.options)}"
            )

    def _clicked(self, option: str, pressed: bool) -> None:
        if pressed and option != self._value:
            self._select(option)
        elif not pressed and option == self._value:  # pressing the chosen one keeps it chosen
            self.buttons[option].value = True

    def _select(self, new: str) -> None:
        old, self._value = self._value, new
        for o, b in self.buttons.items():
            if b.value != (o == new):
                b.value = o == new
        if new != old:
            for cb in self._callbacks:
                cb(new)

    def observe(self, callback: Callable[[str], None]) -> None:
        self._callbacks.append(callback)

    def set_reason(self, option: str, reason: str | None) -> None:
        """Disable `option` with `reason` as its tooltip, or enable it again (reason None)."""
        b = self.buttons[option]
        b.disabled = reason is not None
        b.tooltip = f"unavailable: {reason}" if reason else self._base_tips.get(option, option)
