"""What a page claims, kept as data beside the numbers it is drawn from, so that it can be checked.

A panel that prints a verdict, a plan, a prediction or a lesson records it here, with the values
behind it and the rule that says whether it holds:

    claims.verdict("bf16 A/B", said="faster", ratio=1.72, interval=(1.43, 1.91))
    claims.plan("stacking plan", planned={"ddp": True}, ran={"ddp": True})
    claims.prediction("peak memory", predicted=615, measured=640, tolerance=0.15)
    claims.same("precision to try first", key=conditions, value="bf16")  # one a key
    claims.filled("comparison table", rows)  # never 'nan' or 'None' in a cell

`check()` ends each notebook: a table of what it claimed and why each claim holds, or an error
naming every claim that does not. The notebooks' test runs every notebook, so a sentence that
disagrees with the numbers beside it fails the suite. Claims live in the process that made them
(a kernel, a CLI): a later notebook run starts with none.
"""

from __future__ import annotations

import html
import re
import threading
from dataclasses import dataclass

from .verdict import ACCURACY_TOLERANCE, MIN_EFFECT, UNDECIDED, is_clean_gain, verdict as verdict_of


@dataclass
class Claim:
    where: str  # the panel or sentence that made it
    kind: str  # verdict | plan | prediction | same | filled
    says: str  # what the reader was told
    holds: bool
    checked: str  # against what, in numbers


class ClaimsDisagree(AssertionError):
    """Some claim a page made disagrees with the numbers it was drawn from."""


_CLAIMS: list[Claim] = []
_LOCK = threading.Lock()  # panels record from their worker threads


def record(where: str, kind: str, says: str, holds: bool, checked: str) -> Claim:
    """Keep a claim; one shown again (a table redrawn) is kept once."""
    claim = Claim(where, kind, says, bool(holds), checked)
    with _LOCK:
        if claim not in _CLAIMS:
            _CLAIMS.append(claim)
    return claim


def made() -> list[Claim]:
    """Every claim this process has recorded, oldest first."""
    with _LOCK:
        return list(_CLAIMS)


def clear() -> None:
    with _LOCK:
        _CLAIMS.clear()


def verdict(
    where: str,
    said: str | None,
    ratio: float | None,
    interval: tuple[float, float] | None = None,
    min_effect: float = MIN_EFFECT,
) -> Claim:
    """A shown verdict ("faster", "within noise, but accuracy ...") against the one verdict rule
    applied to its ratio and interval; without an interval it must read "undecided": neither
    faster, slower nor within noise.
    Showing no verdict (None: withheld) claims nothing and always holds."""
    measured = ratio is not None and ratio == ratio
    rule = (
        verdict_of(ratio, interval, min_effect) if interval and measured else UNDECIDED if measured else None
    )
    span = f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else ""
    holds = said is None or said.split(",")[0] == rule
    shown = "nothing measured" if ratio is None or ratio != ratio else f"{ratio:.2f}x{span}"
    return record(where, "verdict", str(said), holds, f"{shown} reads '{rule}' by the verdict rule")


def ratio(where: str, r) -> Claim:
    """The verdict a Ratio (workbench.measure.ratios) shows, against its own ratio and interval."""
    interval = (r.low, r.high) if r.low is not None else None
    return verdict(where, r.verdict, r.ratio, interval, r.min_effect)


def weighed(
    where: str,
    what: str,
    said: str | None,
    before: float,
    after: float,
    tolerance: float = ACCURACY_TOLERANCE,
) -> Claim:
    """A verdict shown for a variant that may have cost accuracy: one that lost more than
    `tolerance` must not read as a clean gain."""
    if before != before or after != after:  # nan: no accuracy measured, nothing to weigh
        return record(where, "verdict", f"{what}: {said}", True, "no accuracy measured")
    return record(
        where,
        "verdict",
        f"{what}: {said}",
        before - after <= tolerance or not is_clean_gain(said),
        f"accuracy {before:.3f} -> {after:.3f}, tolerance {tolerance}",
    )


def plan(where: str, planned: dict[str, bool], ran: dict[str, bool]) -> Claim:
    """What a plan said would run (True) or not, against what then ran."""
    wrong = [
        f"{k}: planned to {'run' if v else 'skip'}, {'ran' if ran.get(k) else 'did not run'}"
        for k, v in planned.items()
        if k in ran and bool(ran[k]) != bool(v)
    ]
    missing = [k for k in planned if k not in ran]
    says = ", ".join(f"{k} {'will run' if v else 'will not'}" for k, v in planned.items())
    checked = "; ".join(wrong) if wrong else f"{len(planned) - len(missing)} of {len(planned)} as planned"
    if missing:
        checked += f" ({', '.join(missing)} not reached)"
    return record(where, "plan", says, not wrong, checked)


def prediction(
    where: str,
    what: str,
    predicted: float,
    measured: float,
    tolerance: float,
    reason: str = "",
    unit: str = "",
) -> Claim:
    """A prediction holds within `tolerance` (a fraction of the measured value) and only there: a
    reason for a miss is shown beside it ("off by 56 %, outside its 15 %: ..."), and the claim
    still fails, since the page's number was wrong."""
    gap = abs(predicted - measured) / abs(measured) if measured else float("inf")
    within = gap <= tolerance
    says = f"{what} predicted {predicted:,.4g}{unit}, measured {measured:,.4g}{unit}"
    checked = (
        f"off by {gap:.0%}, within its {tolerance:.0%}"
        if within
        else f"off by {gap:.0%}, outside its {tolerance:.0%}"
        + (f": {reason}" if reason else ", and no reason is given")
    )
    return record(where, "prediction", says, within, checked)


def same(where: str, what: str, key: str, value) -> Claim:
    """One answer per question: `value` must equal every other answer recorded for `what` under
    the same `key` (for example the precision to try first, under one set of conditions)."""
    earlier = [c for c in made() if c.kind == "same" and c.says.startswith(f"{what} [{key}]: ")]
    others = {c.says.split("]: ", 1)[1] for c in earlier}
    holds = not others or others == {str(value)}
    checked = (
        f"the same as {len(earlier)} earlier answer(s)"
        if earlier and holds
        else f"earlier answers: {', '.join(sorted(others))}"
        if earlier
        else "the first answer"
    )
    return record(where, "same", f"{what} [{key}]: {value}", holds, checked)


MISSING = re.compile(r"(?<![A-Za-z])(nan|NaN|None)(?![A-Za-z])")  # also inside "nanx [nan, nan]"


def filled(
    where: str, rows: list[dict], verdicts: tuple[str, ...] = (), required: tuple[str, ...] = ()
) -> Claim:
    """A shown table never reads 'nan' or 'None' where a reader expects a value: `rows` hold each
    cell as shown, and `verdicts` names the columns whose verdict was lost when the value behind
    the cell was a number that is not one (a verdict column of a DataFrame filled with NaN). A
    blank cell is a value not measured yet, which a live table shows, except in a `required`
    column: a finished table whose page reads a figure from it (a reproduction's losses) must
    hold one in every row."""
    bad = sorted(
        {
            k
            for r in rows
            for k, v in r.items()
            if MISSING.search(str(v))
            or (k in verdicts and isinstance(v, float) and v != v)
            or (k in required and not str(v).strip())
        }
    )
    return record(
        where,
        "filled",
        f"a table of {len(rows)} row(s)",
        not bad,
        f"'nan', 'None' or a blank where a value is required, in: {', '.join(bad)}"
        if bad
        else "every cell a value" + (", or blank where none is required" if not required else ""),
    )


class Checked:
    """The claims of this process, as a table in a notebook and as text elsewhere."""

    def __init__(self, claims: list[Claim]):
        self.claims = claims

    def summary(self) -> str:
        n = len(self.claims)
        return (
            f"{n} claim(s) on this page, each checked against the numbers beside it: all hold."
            if n
            else "This page made no claims to check."
        )

    def __str__(self) -> str:
        return "\n".join(
            [self.summary()] + [f"- [{c.kind}] {c.where}: {c.says} ({c.checked})" for c in self.claims]
        )

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(c.where)}</td><td>{html.escape(c.says)}</td>"
            f"<td>{html.escape(c.checked)}</td></tr>"
            for c in self.claims
        )
        table = (
            f"<details><summary>the claims</summary><table><tr><th>where</th><th>says</th>"
            f"<th>checked</th></tr>{rows}</table></details>"
            if rows
            else ""
        )
        return f"<p>{html.escape(self.summary())}</p>{table}"


def check() -> Checked:
    """Every claim this process made, checked: raises ClaimsDisagree naming each one that does
    not hold, else returns them for display."""
    claims = made()
    wrong = [c for c in claims if not c.holds]
    if wrong:
        raise ClaimsDisagree(
            f"{len(wrong)} of {len(claims)} claim(s) disagree with their numbers: "
            + "; ".join(f"{c.where}: '{c.says}' ({c.checked})" for c in wrong)
        )
    return Checked(claims)
