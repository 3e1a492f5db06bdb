"""The documentation site's build hooks (mkdocs.yml `hooks:`), run by `make docs`: pages hold
markers that the build fills from the code and from the results files, so the site cannot drift
from either.

- `<!-- cli-reference -->`: every `workbench` subcommand's `--help`, from the argparse parsers.
- `<!-- config-reference -->`: every RunConfig field, its type, default and meaning, from the
  dataclasses and the comment beside (or above) each field in workbench/config.py.
- `<!-- results-index -->`: a link to every results file under docs/results/, by machine.
- every results page (docs/results/): its printed output readable at the site's width, Markdown
  tables inside it lifted out of the code block and long lines wrapped (the file stays as written).
- `<!-- lab-minutes -->` on a lab page: how long its notebook took with its defaults, quiet and beside
  two busy processes, from the results file the README's notebooks table reads.
- `<!-- lab-key-figure -->` on a lab page: the line of a results file (of that same machine) that
  answers the notebook's question, quoted as the benchmark wrote it.
- `<!-- lab-picture -->` on a lab page: the picture of the notebook after Run All that the browser
  test took (`python -m tools.bench notebooks --pictures`), with what took it.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import io
import json
import re
import textwrap
import tokenize
import typing
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


SITE_COLUMNS = 80  # what a code block shows without scrolling at 1280 px (688 px of monospace)


def _subcommands(p: argparse.ArgumentParser) -> dict:
    return next((a.choices for a in p._actions if isinstance(a, argparse._SubParsersAction)), {})


def cli_commands() -> list[tuple]:
    """Every `workbench` command and subcommand ("runs export"): its name, its parser, and the
    parser of the command it belongs to (None for a command)."""
    from workbench.cli import parser

    out = []
    for name, sub in sorted(_subcommands(parser()).items()):
        out.append((name, sub, None))
        out += [(f"{name} {inner}", p, sub) for inner, p in sorted(_subcommands(sub).items())]
    return out


def example_of(name: str, sub: argparse.ArgumentParser, parent: argparse.ArgumentParser | None = None):
    """The first `workbench NAME ...` line in the docstring of the module behind the command (its
    parent's, for a subcommand), less its comment; a command's own line, not one of its
    subcommands'. None where the docstring shows none."""
    import sys

    main = sub.get_default("_main") or (parent.get_default("_main") if parent else None)
    doc = (sys.modules[main.__module__].__doc__ or "") if main else ""
    inner, n = _subcommands(sub), len(name.split())
    for line in doc.splitlines():
        words = line.split("  #")[0].split()
        if words[: n + 1] == ["workbench", *name.split()] and not (
            len(words) > n + 1 and words[n + 1] in inner
        ):
            return " ".join(words)
    return None


def cli_reference() -> str:
    parts = []
    for name, sub, parent in cli_commands():
        sub.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=SITE_COLUMNS)
        example = example_of(name, sub, parent)
        if example and len(example) > SITE_COLUMNS:  # a shell line continued, not clipped
            example = " \\\n    ".join(
                textwrap.wrap(example, SITE_COLUMNS - 6, break_long_words=False, break_on_hyphens=False)
            )
        shown = f"For example:\n\n```bash\n{example}\n```\n\n" if example else ""
        parts.append(f"## workbench {name}\n\n{shown}```text\n{sub.format_help().rstrip()}\n```\n")
    return "\n".join(parts)


def _comments(source: str) -> dict[int, str]:
    """Line number -> the comment on that line."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {t.start[0]: t.string.lstrip("#").strip() for t in tokens if t.type == tokenize.COMMENT}


def config_fields(source: str | None = None) -> list[dict]:
    """Every RunConfig field, section by section: its path, type (with its allowed values), default and
    what it means (the comment beside it, else the comment lines right above it; '' where there is none).
    `source`: config.py's text (a test plants a field without its comment)."""
    from workbench import config

    source = source if source is not None else Path(config.__file__).read_text()
    lines, comments = source.splitlines(), _comments(source)
    classes = {n.name: n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)}
    out = []
    for section in dataclasses.fields(config.RunConfig):
        cls = section.default_factory
        where = {
            n.target.id: n.lineno
            for n in classes[cls.__name__].body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
        }
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            line = where[f.name]
            meaning = comments.get(line, "")
            above = line - 1
            while not meaning and lines[above - 1].strip().startswith("#"):
                above -= 1
            if not meaning:
                meaning = " ".join(comments[n] for n in range(above + 1, line) if n in comments)
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            out.append(
                {
                    "field": f"{section.name}.{f.name}",
                    "type": _type_text(hints[f.name]),
                    "default": json.dumps(default),
                    "meaning": meaning,
                }
            )
    return out


def _type_text(hint) -> str:
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(json.dumps(a) for a in typing.get_args(hint))
    if typing.get_origin(hint) is typing.Union:
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return " or ".join(_type_text(a) for a in inner) + " or null"
    if typing.get_origin(hint) in (list, dict):
        return repr(hint).replace("typing.", "")
    return getattr(hint, "__name__", repr(hint))


def config_reference() -> str:
    parts, current = [], None
    for f in config_fields():
        section = f["field"].split(".")[0]
        if section != current:
            current = section
            parts.append(f"\n## {section}\n\n| field | type | default | what it sets |\n|---|---|---|---|")
        meaning = f["meaning"].replace("|", "\\|")
        parts.append(f"| `{f['field']}` | {f['type']} | `{f['default']}` | {meaning} |")
    return "\n".join(parts) + "\n"


def results_index() -> str:
    lines = []
    for folder in sorted(p for p in (DOCS / "results").iterdir() if p.is_dir()):
        lines.append(f"\n## {folder.name}\n")
        for page in sorted(folder.glob("*.md")):
            title = page.read_text().splitlines()[0].lstrip("# ").strip()
            lines.append(f"- [{title}]({folder.name}/{page.name})")
    return "\n".join(lines) + "\n"


MINUTES_FROM = re.compile(r"Minutes from \[([^\]]+)\]")


def readme_results() -> Path:
    """The notebooks' results file the README's minutes come from: its machine's folder is the one
    the lab pages quote."""
    return DOCS.parent / MINUTES_FROM.search((DOCS.parent / "README.md").read_text()).group(1)


def lab_minutes(notebook: str) -> str:
    """How long `notebook` took with its defaults, from the file the README's minutes come from."""
    from tools.bench.notebooks import minutes

    source = readme_results()
    report = json.loads(source.with_suffix(".json").read_text())
    link = f"[its results](../{source.relative_to(DOCS).as_posix()})"
    by_mode = report["notebooks"].get(notebook)
    if not by_mode:
        return (
            f"not measured yet on the machine of {link}; `python -m tools.bench notebooks --both` measures it"
        )
    quiet, busy = minutes(by_mode).split(" / ")  # the README's figures, the same rounding
    disturbed = " (other programs disturbed that run)" if "*" in quiet else ""
    return (
        f"{quiet.replace('*', '')} minutes quiet{disturbed} and {busy} beside two busy processes, with "
        f"its defaults on {report['machine']['summary']} ({link})"
    )


# each notebook's question, answered by one line of a results file: (file, the line's start as a
# pattern, what the line measured)
KEY_FIGURES = {
    "00_tour": (
        "dashboard",
        r"samples/s with the dashboard / without",
        "a run's samples/s with its live charts drawn, over without",
    ),
    "01_mixed_precision": (
        "precision",
        r"- bf16 against fp32 on mlp",
        "bf16 against fp32 on the default MLP's training steps",
    ),
    "02_distributed": (
        "launch",
        r"\s*2 ranks, warm ranks / bare torchrun",
        "two DDP ranks to their first step, warm, against bare torchrun",
    ),
    "03_pruning_quantization": (
        "compress",
        r"structured 50%",
        "structured pruning of half of the 3x1024 MLP against the dense model, at batch 1 and 64",
    ),
    "04_hardware": (
        "hardware",
        r"matmul fp32",
        "the fp32 matmul ceiling, by the workbench's timer and by torch.utils.benchmark",
    ),
    "05_data_loading": (
        "loading",
        r"2 workers vs 0 workers",
        "two loader workers against none, on PNG files decoded each epoch",
    ),
    "06_combine_and_export": (
        "export",
        r"Script over run",
        "the exported train.py against the run it came from, beside two busy processes",
    ),
    "07_time_and_memory": ("profile", r"bound by ", "what bounds the default transformer's step"),
    "08_tune_your_model": (
        "tunes-quiet",
        r"\| digits MLP: the tuned config",
        "the digits MLP's tuned config against its baseline, in an A/B of its own",
    ),
    "09_serve_your_model": (
        "serve",
        r"Batching \(",
        "dynamic batching against none, on a model whose forward takes milliseconds",
    ),
}


def lab_key_figure(notebook: str) -> str:
    """The line of a results file that answers `notebook`'s question, as the benchmark wrote it, from
    the machine whose results the lab pages quote. Missing, the build stops: a page never says less
    than it did without a reason."""
    name, start, meaning = KEY_FIGURES[notebook]
    source = readme_results().parent / f"{name}.md"
    text = source.read_text() if source.exists() else ""
    line = next((x for x in text.splitlines() if re.match(start, x)), None)
    if line is None:
        raise ValueError(
            f"{source.relative_to(DOCS.parent)} has no line starting {start!r}: rerun its benchmark"
        )
    if line.startswith("|"):  # a table row: its cells, left to right, up to its measured ratio
        cells = [c.strip() for c in line.strip("|").split("|") if c.strip()]
        ratio = next((i for i, c in enumerate(cells) if re.search(r"\dx \[", c)), len(cells) - 1)
        line = " · ".join(cells[: ratio + 1])
    wrapped = textwrap.wrap(line.strip(), SITE_COLUMNS, subsequent_indent="  ", break_on_hyphens=False)
    link = f"[{name}](../{source.relative_to(DOCS).as_posix()})"
    return "\n".join([f"**Key figure** ({link}): {meaning}.", "", "```text", *wrapped, "```"])


def lab_picture(notebook: str) -> str:
    """The picture of `notebook` after Run All that the browser test took, with what took it."""
    picture = DOCS / "images" / "labs" / f"{notebook}.jpg"
    if not picture.exists():
        return "No picture of this notebook yet: `python -m tools.bench notebooks --pictures` takes one."
    about = json.loads((picture.parent / "pictures.json").read_text())
    return (
        f"![Notebook {notebook} after Run All with its defaults](../images/labs/{picture.name})\n\n"
        f"*After Run All with its defaults, in JupyterLab in Chromium: taken by `{about['command']}` on "
        f"{about['machine']}, {about['written']}, other programs holding {about['other_cpu_cores']:.2f} "
        "cores meanwhile.*"
    )


def readable_results(markdown: str) -> str:
    """A results file as the site shows it: in its ```text blocks, runs of table rows become Markdown
    tables and lines wider than the site wrap, continued with an indent."""
    out, inside = [], False  # inside: False, True (a code block) or "table" (lifted out of one)
    for line in markdown.splitlines():
        if inside == "table":
            if line.startswith("|"):
                out.append(line)
            elif line.startswith("```"):  # the block ended with the table: its fence is closed already
                inside = False
            else:
                out += ["", "```text", line]
                inside = True
        elif line.startswith("```"):
            inside = not inside
            out.append(line)
        elif inside and line.startswith("|"):
            if out[-1].startswith("```"):  # the block opened just now: drop its fence
                out.pop()
            else:
                out += ["```", ""]
            out.append(line)
            inside = "table"
        elif inside and len(line) > SITE_COLUMNS:
            out += textwrap.wrap(line, SITE_COLUMNS, subsequent_indent="  ", break_on_hyphens=False)
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if Path(page.file.src_uri).parts[0] == "results" and page.file.src_uri != "results/index.md":
        markdown = readable_results(markdown)
    if "<!-- lab-minutes -->" in markdown:
        notebook = Path(page.file.src_uri).stem
        markdown = markdown.replace("<!-- lab-minutes -->", lab_minutes(notebook))
    if "<!-- lab-key-figure -->" in markdown:
        markdown = markdown.replace("<!-- lab-key-figure -->", lab_key_figure(Path(page.file.src_uri).stem))
    if "<!-- lab-picture -->" in markdown:
        markdown = markdown.replace("<!-- lab-picture -->", lab_picture(Path(page.file.src_uri).stem))
    if "<!-- cli-reference -->" in markdown:
        markdown = markdown.replace("<!-- cli-reference -->", cli_reference())
    if "<!-- config-reference -->" in markdown:
        markdown = markdown.replace("<!-- config-reference -->", config_reference())
    if "<!-- results-index -->" in markdown:
        markdown = markdown.replace("<!-- results-index -->", results_index())
    return markdown
