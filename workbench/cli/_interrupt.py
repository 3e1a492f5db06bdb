"""Ctrl-C and SIGTERM in a long command: the first asks the work to stop at its next point and keep
what it has, which the command then prints (and writes as JSON marked interrupted) before exiting
130; a second stops at once (KeyboardInterrupt), and the command still prints what it had.

    with Interrupt("tune") as interrupted:
        report = tune(cfg, stop=interrupted)    # stop() is True once Ctrl-C was pressed
    return interrupted.exit_code(0)             # 130 when it was
"""

from __future__ import annotations

import signal
import sys

EXIT_INTERRUPTED = 130  # what a shell reports for a command ended by Ctrl-C (128 + SIGINT)


class Interrupt:
    def __init__(self, command: str, quiet: bool = False):
        self.command, self.quiet = command, quiet
        self.asked = ""  # the signal's name once one came
        self._before: dict = {}

    def __call__(self) -> bool:
        return bool(self.asked)

    def _heard(self, signum, frame) -> None:
        if self.asked:  # the second: now
            raise KeyboardInterrupt
        self.asked = signal.Signals(signum).name
        if not self.quiet:
            print(
                f"workbench {self.command}: {self.asked}: stopping at the next point and keeping "
                "what was measured (Ctrl-C again stops at once)",
                file=sys.stderr,
                flush=True,
            )

    def __enter__(self) -> "Interrupt":
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._before[sig] = signal.signal(sig, self._heard)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._before.items():
            signal.signal(sig, handler)
        if exc[0] is KeyboardInterrupt:
            self.asked = self.asked or "SIGINT"

    def exit_code(self, code: int = 0) -> int:
        return EXIT_INTERRUPTED if self.asked else code

    def said(self) -> str:
        """The line a command ends with when it was interrupted ('' when it was not)."""
        return (
            f"workbench {self.command}: interrupted ({self.asked}): the result above is what was "
            "measured before it"
            if self.asked
            else ""
        )
