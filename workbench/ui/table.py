"""Every table a panel draws, drawn one way: titles in words with units (`titles.title`), numbers
to the digits they carry, a verdict as a coloured chip, long reasons folded behind their first
clause, a condition the whole table shares said once above it, and rows that wrap inside the
notebook's cell instead of running off its right edge.

    html_table(rows, ["variant", "verdict", "latency_ms", "why"],
               above="beside other programs ...", where="the compression table")

`where` names the table in the claims check: a table never shows 'nan' or 'None' for a value.
"""

from __future__ import annotations

import html
import math
import numbers
import re

from ..machine.contention import is_busy
from ..measure import claims
from ..measure.ratios import speedup_text
from ..measure.verdict import FASTER, is_clean_gain
from .titles import title

STATUS_COLORS = {
    "baseline": "#636efa",
    "faster": "#2ca02c",
    "slower": "#d62728",
    "within noise": "#7f7f7f",
    "undecided": "#bcbd22",
    "skipped": "#c7c7c7",
    "failed": "#000000",
}
COST_COLOR = "#ff7f0e"  # faster, but it lost accuracy: never the gain's green
CHIPS = ("verdict", "status")  # columns whose text is a verdict, drawn as a chip
FOLD_AT = 90  # characters: a longer cell shows its first clause and folds the rest
STYLE = (
    "<style>.wb-table{border-collapse:collapse;font-size:12px;max-width:100%;"
    "table-layout:auto}.wb-table th,.wb-table td{padding:2px 8px;text-align:left;"
    "vertical-align:top;overflow-wrap:normal;word-break:normal;border-bottom:1px solid #eee}"
    ".wb-table td.num{text-align:right;white-space:nowrap}.wb-table td.ratio{text-align:right}"
    ".wb-chip{border-radius:8px;"
    "padding:0 6px;color:#fff;white-space:nowrap}.wb-table details summary{cursor:pointer}"
    ".wb-note{font-size:11px;color:#555;max-width:100%}</style>"
)


def load_line(other_cores) -> str:
    """The load other programs put on a table's runs, said once above it ('' when quiet):
    `other_cores` holds each row's reading (None or nan where none was taken)."""
    seen = [c for c in other_cores if isinstance(c, numbers.Number) and c == c]
    if not seen or not is_busy(max(seen)):
        return ""
    return f"other programs held up to {max(seen):.1f} cores while these ran"


def status_color(status: str | None, default: str = "#7f7f7f") -> str:
    """A verdict's colour by its first words ("faster, partial: ..." is faster's); a gain that cost
    accuracy is never drawn green."""
    if not status:
        return default
    if status.startswith(FASTER) and not is_clean_gain(status):
        return COST_COLOR
    return STATUS_COLORS.get(status.split(",")[0], default)


def number_text(value) -> str:
    """A number as a reader takes it in: thousands separated, three significant digits below 100,
    none after the point above; '' for nothing measured."""
    if value is None or isinstance(value, bool):
        return "" if value is None else str(value)
    if isinstance(value, numbers.Integral):
        return f"{value:,}"
    v = float(value)
    if math.isnan(v) or math.isinf(v):
        return ""
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def cell_text(value) -> str:
    """A cell's text: a number formatted, nothing where nothing was measured, never 'nan'/'None'."""
    if isinstance(value, numbers.Number):
        return number_text(value)
    if value is None:
        return ""
    text = str(value)
    return "" if text in ("nan", "None", "NaN") else text


RATIO_TEXT = re.compile(r"^-?[\d.,]+x( \[[\d.,]+, [\d.,]+\])?$")  # "1.31x [1.18, 1.44]"


def _lost(value) -> bool:
    return isinstance(value, float) and value != value


def _cell(column: str, value) -> str:
    text = cell_text(value)
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        return f"<td class='num'>{html.escape(text)}</td>"
    if RATIO_TEXT.match(text):  # may break before its interval, never inside it
        return f"<td class='ratio'>{html.escape(text).replace(', ', ',&nbsp;')}</td>"
    if column in CHIPS and text:
        head, _, rest = text.partition(", ")
        chip = f"<span class='wb-chip' style='background:{status_color(text)}'>{html.escape(head)}</span>"
        return f"<td>{chip}{(' ' + html.escape(rest)) if rest else ''}</td>"
    if len(text) > FOLD_AT:
        cut = next(
            (i for i in (text.find("; "), text.find(": "), text.find(". ")) if 0 < i < FOLD_AT), FOLD_AT
        )
        return (
            f"<td><details><summary>{html.escape(text[:cut])} ...</summary>"
            f"{html.escape(text[cut:].lstrip(';:. '))}</details></td>"
        )
    return f"<td>{html.escape(text)}</td>"


def html_table(
    rows: list[dict],
    columns: list[str] | None = None,
    *,
    above: str = "",
    below: str = "",
    where: str = "a table",
    colors: dict[int, str] | None = None,
    css: str = "",
    required: tuple[str, ...] = (),
) -> str:
    """`rows` as an HTML table of `columns` (default: the first row's keys); `above` and `below`
    are one-line notes the whole table shares; `colors` gives a row's text colour by index; `css`
    an extra class a page or test finds the table by; `required` the columns every row must fill
    (a blank there fails the page's claims check)."""
    columns = list(columns or (rows[0].keys() if rows else []))
    # the text a reader sees, and a verdict column's value behind it (a lost verdict is a NaN)
    claims.filled(
        where,
        [
            {c: (r.get(c) if c in CHIPS and _lost(r.get(c)) else cell_text(r.get(c))) for c in columns}
            for r in rows
        ],
        verdicts=CHIPS,
        required=tuple(required),
    )
    for r in rows:
        _weigh_shown(where, r, columns)
    head = "".join(f"<th>{html.escape(title(c))}</th>" for c in columns)
    colors = colors or {}
    body = "".join(
        (f"<tr style='color:{colors[i]}'>" if i in colors else "<tr>")
        + "".join(_cell(c, r.get(c)) for c in columns)
        + "</tr>"
        for i, r in enumerate(rows)
    )
    note = lambda text: f"<div class='wb-note'>{html.escape(text)}</div>" if text else ""  # noqa: E731
    return (
        f"{STYLE}{note(above)}<table class='wb-table {css}'><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table>{note(below)}"
    )


def _weigh_shown(where: str, row: dict, columns: list[str]) -> None:
    """A verdict a row shows, weighed against the accuracy its variant kept: a row that carries
    the reference's accuracy (`dense_accuracy`) and its own (fine-tuned where it was) must not
    show a clean gain after losing more than the tolerance, whatever the columns shown."""
    said, reference = row.get("verdict"), row.get("dense_accuracy")
    if "verdict" not in columns or not isinstance(said, str) or not isinstance(reference, numbers.Number):
        return
    kept = row.get("accuracy_finetuned")
    kept = kept if isinstance(kept, numbers.Number) and kept == kept else row.get("accuracy")
    if isinstance(kept, numbers.Number):
        label = next((str(row[k]) for k in ("variant", "amount") if k in row), "a row")
        claims.weighed(where, label, said, float(reference), float(kept))


class Table:
    """A table for a notebook cell to show as its result: `Table(df, columns, ...)` draws as
    `html_table` (a DataFrame shown raw keeps its field names, every digit, and runs wide).
    `intervals` folds a ratio's interval columns into its cell: {"speedup": ("low", "high")}."""

    def __init__(
        self,
        rows,
        columns: list[str] | None = None,
        *,
        intervals: dict[str, tuple[str, str]] | None = None,
        **options,
    ):
        rows = rows.to_dict("records") if hasattr(rows, "to_dict") else [dict(r) for r in rows]
        for r in rows:
            for column, (low, high) in (intervals or {}).items():
                r[column] = speedup_text(r.get(column), r.get(low), r.get(high))
        self.rows, self.columns, self.options = rows, columns, options

    def _repr_html_(self) -> str:
        return html_table(self.rows, self.columns, **self.options)
