"""A search that may not end (torch-pruning's dependency graph on some models): a time limit that
stops it from whichever thread runs it, and progress said while it runs, so a long search shows it
moves and a stuck one says where it stuck.

    from workbench.compress.long_search import Search, search_progress
    with search_progress(print):                  # a face: the CLI prints, the panel shows
        search = Search("structured pruning of GPT2LMHeadModel", limit_s=30)
        with search.bounded():
            search.at("tracing its forward")       # what it does now: said and kept for a refusal
            ...                                    # raises SearchTimeout once the limit passes
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable

QUIET_S = 2.0  # a search that ends sooner says nothing: progress is for the long ones
EVERY_S = 1.0  # then at most a line a second

_LISTENER: ContextVar[Callable[[str], None] | None] = ContextVar("search_progress", default=None)


class SearchTimeout(Exception):
    pass


@contextmanager
def search_progress(listener: Callable[[str], None]):
    """Within this block, in this thread, every long search says what it is doing to `listener`
    (one line at a time)."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


class Search:
    """One bounded search: `at(where)` names what it does now; `bounded()` stops it after
    `limit_s` seconds with SearchTimeout, whose message is the last `where`."""

    def __init__(self, what: str, limit_s: float):
        self.what, self.limit_s = what, limit_s
        self.where = ""
        self.start = self.said = time.monotonic()
        self.listener = _LISTENER.get()

    def at(self, where: str) -> None:
        self.where = where
        self._say(time.monotonic())

    def _say(self, now: float) -> None:
        if self.listener is None or now - self.start < QUIET_S or now - self.said < EVERY_S:
            return
        self.said = now
        self.listener(f"{self.what}: {self.where} ({now - self.start:.0f} s of at most {self.limit_s:g} s)")

    @contextmanager
    def bounded(self):
        """The check rides on Python's profile hook (every thousandth call), so it stops a loop in
        pure Python code, in whichever thread runs the block, without a signal; the same check
        says the progress of a search that stays long in one place."""
        end = self.start + self.limit_s
        calls = [0]

        def check(frame, event, arg):
            if event == "call":
                calls[0] += 1
                if calls[0] % 1000 == 0:
                    now = time.monotonic()
                    if now > end:
                        sys.setprofile(None)
                        raise SearchTimeout(self.where)
                    self._say(now)

        before = sys.getprofile()
        sys.setprofile(check)
        try:
            yield
        finally:
            sys.setprofile(before)
