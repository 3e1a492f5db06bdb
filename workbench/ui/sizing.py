"""Widgets sized to their words, so no label is cut to "Measure prop..." (the browser test checks
every button and label on a page): a button as wide as its label, a description as wide as its
text.

    button("Measure properly (A/B)", icon="balance-scale")
    widgets.FloatText(description="budget (min)", style=FULL_LABEL)
"""

from __future__ import annotations

import ipywidgets as widgets

FULL_LABEL = {"description_width": "initial"}  # a description as wide as its words


def button(description: str, **kwargs) -> widgets.Button:
    """A Button as wide as its label (ipywidgets' fixed default width cuts a longer one short), and
    kept so in a row: a long status beside it in an HBox must not squeeze it (flex: 0 0 auto)."""
    return widgets.Button(
        description=description,
        **kwargs,
        layout=widgets.Layout(width="auto", min_width="80px", flex="0 0 auto"),
    )
