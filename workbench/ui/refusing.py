"""Widget values set from Python are refused in one line, as the config refuses a bad field: a
slider out of its range instead of clamped (ipywidgets' own turns `panel.nproc.value = 4` on a
2-core machine into 2 without a word; in the page a slider cannot leave its range), and a value
of the wrong type or not among a list's choices with the control's name and what it allows.

    ranks = RefusingIntSlider(value=2, min=1, max=2, description="ranks", why="the ranks this machine runs")
    ranks.value = 4   # Refused: ranks=4 is not allowed: 1 to 2 (the ranks this machine runs)
"""

from __future__ import annotations

import ipywidgets as widgets
from traitlets import TraitError, validate

from ..config import ConfigError, shown


class Refused(ConfigError, TraitError):
    """A widget value out of range: a ConfigError for callers, a TraitError for traitlets (which
    then keeps the old value)."""


def _in_range(slider, value, low, high):
    if not low <= value <= high:
        because = f" ({slider.why})" if slider.why else ""
        raise Refused(
            f"{slider.description or 'value'}={shown(value)} is not allowed: {low:g} to {high:g}{because}"
        )
    return value


class RefusingIntSlider(widgets.IntSlider):
    def __init__(self, *args, why: str = "", **kwargs):
        self.why = why  # what the range comes from, said in the refusal
        super().__init__(*args, **kwargs)

    @validate("value")
    def _validate_value(self, proposal):  # the name of IntSlider's clamping validator: replaces it
        return _in_range(self, proposal["value"], self.min, self.max)


class RefusingFloatLogSlider(widgets.FloatLogSlider):
    """Its min and max are exponents of `base`: the values it allows are base**min to base**max."""

    def __init__(self, *args, why: str = "", **kwargs):
        self.why = why
        super().__init__(*args, **kwargs)

    @validate("value")
    def _validate_value(self, proposal):  # replaces FloatLogSlider's clamping validator
        return _in_range(self, proposal["value"], self.base**self.min, self.base**self.max)


def set_value(name: str, widget, value) -> None:
    """`widget.value = value`, or a one-line ConfigError naming the control and what it allows."""
    if isinstance(widget, widgets.Checkbox):
        if value and widget.disabled:
            raise ConfigError(f"{name} cannot be turned on here: {widget.tooltip}")
        value = bool(value)
    try:
        widget.value = value
    except Refused:
        raise
    except TraitError as e:  # the wrong type, or not among a list's choices
        options = getattr(widget, "options", None)
        allowed = f"one of {', '.join(map(str, options))}" if options is not None else str(e)
        raise ConfigError(f"{name}={shown(value)} is not allowed: {allowed}") from None


def set_controls(controls: dict, values: dict, check) -> None:
    """Set controls by name as a person would, then `check()` them together (it builds the
    config): a value its control or the config refuses is refused in one line, and every control
    keeps what it had."""
    unknown = [name for name in values if name not in controls]
    if unknown:
        raise ConfigError(f"unknown control {unknown[0]!r}; allowed: {', '.join(controls)}")
    kept = {name: control.value for name, control in controls.items()}
    try:
        for name, value in values.items():
            set_value(name, controls[name], value)
        check()
    except ConfigError:
        for name, value in kept.items():
            controls[name].value = value
        raise
