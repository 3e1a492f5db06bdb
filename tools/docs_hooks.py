"""The documentation site's build hooks (mkdocs.yml `hooks:`), run by `make docs`: pages hold
markers that the build fills from the code and from the results files, so the site cannot drift
from either.

- `<!-- cli-reference -->`: every `workbench` subcommand's `--help`, from the argparse parsers.
- `<!-- results-index -->`: a link to every results file under docs/results/, by machine.
"""

from __future__ import annotations

import argparse
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def cli_reference() -> str:
    from workbench.cli import parser

    top = parser()
    subs = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    parts = []
    for name, sub in sorted(subs.choices.items()):
        sub.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=100)
        parts.append(f"## workbench {name}\n\n```text\n{sub.format_help().rstrip()}\n```\n")
    return "\n".join(parts)


def results_index() -> str:
    lines = []
    for folder in sorted(p for p in (DOCS / "results").iterdir() if p.is_dir()):
        lines.append(f"\n## {folder.name}\n")
        for page in sorted(folder.glob("*.md")):
            title = page.read_text().splitlines()[0].lstrip("# ").strip()
            lines.append(f"- [{title}]({folder.name}/{page.name})")
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if "<!-- cli-reference -->" in markdown:
        markdown = markdown.replace("<!-- cli-reference -->", cli_reference())
    if "<!-- results-index -->" in markdown:
        markdown = markdown.replace("<!-- results-index -->", results_index())
    return markdown
