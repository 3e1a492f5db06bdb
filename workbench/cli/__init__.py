"""The `workbench` command, a face run in a terminal: one module per subcommand, each with
`add_parser(subparsers)` and `main(args) -> int`, found by name. May import everything below it.

Every subcommand module is imported to build the parser, so each imports the labs it runs inside
its `main`: `workbench runs` never pays for torch, and `--help` answers at once."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys


def commands() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def one_line(text: str) -> str:
    """An error re-raised from a loader worker carries the worker's traceback: keep its last line."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if len(lines) > 1 and any("Traceback" in ln for ln in lines):
        return lines[-1]
    return " ".join(lines)


def parser() -> argparse.ArgumentParser:
    """The whole command line, every subcommand's parser in it (the CLI reference is drawn from it)."""
    top = argparse.ArgumentParser(prog="workbench", description="PyTorch optimization workbench")
    sub = top.add_subparsers(dest="command", required=True)
    for name in commands():
        module = importlib.import_module(f"{__name__}.{name}")
        module.add_parser(sub).set_defaults(_main=module.main)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args._argv = list(sys.argv[1:] if argv is None else argv)  # as typed: serve --workers repeats it
    from ..config import ConfigError
    from ..disk import disk_message

    try:
        return args._main(args)
    except KeyboardInterrupt:  # what a command had is printed by it; no traceback, no lost prompt
        print(f"workbench {args.command}: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    except ConfigError as e:
        print(f"workbench {args.command}: {one_line(str(e))}", file=sys.stderr)
        return 2
    except OSError as e:  # a file or folder that cannot be made, read or written: path and cause
        print(f"workbench {args.command}: {disk_message(e.filename or '?', e, 'using')}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
