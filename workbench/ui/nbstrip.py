"""Strip notebooks for committing: clear outputs and execution counts, drop widget state.

    python -m workbench.ui.nbstrip notebooks/*.ipynb          # rewrite in place
    python -m workbench.ui.nbstrip --check notebooks/*.ipynb  # exit 1 if any needs stripping
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def problems(nb: dict) -> list[str]:
    """What keeps a notebook from being committable, one line each (empty when clean)."""
    out = []
    if "widgets" in nb.get("metadata", {}):
        out.append("metadata.widgets is present")
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        if cell.get("outputs"):
            out.append(f"cell {i} has outputs")
        if cell.get("execution_count") is not None:
            out.append(f"cell {i} has an execution count")
    return out


def strip(nb: dict) -> dict:
    nb.get("metadata", {}).pop("widgets", None)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        cell.get("metadata", {}).pop("execution", None)
    return nb


def strip_file(path: str | Path) -> bool:
    """Rewrite `path` stripped (in nbformat's layout). True if it changed."""
    path = Path(path)
    nb = json.loads(path.read_text(encoding="utf-8"))
    if not problems(nb):
        return False
    path.write_text(json.dumps(strip(nb), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workbench.ui.nbstrip", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--check", action="store_true", help="report, do not rewrite")
    args = parser.parse_args(argv)
    bad = 0
    for p in args.paths:
        if args.check:
            found = problems(json.loads(Path(p).read_text(encoding="utf-8")))
            for line in found:
                print(f"{p}: {line}")
            bad += bool(found)
        elif strip_file(p):
            print(f"stripped {p}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
