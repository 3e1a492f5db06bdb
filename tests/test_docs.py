"""The front door and the manual: a README a newcomer reads in minutes, documentation pages whose
measured figures all come from a generated results file, a CLI reference drawn from the parsers,
and command lines in the pages and notebooks that use only flags their commands take."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# A measured comparison as the workbench writes one: "1.72x [1.43, 1.91]" or "8,064 [7,761, 8,336]".
INTERVAL = re.compile(r"\d[\d,]*(?:\.\d+)?x? \[\d[\d,]*(?:\.\d+)?, \d[\d,]*(?:\.\d+)?\]")
RATIO = re.compile(r"\b\d+\.\d+x\b")


def pages() -> list[Path]:
    return [p for p in DOCS.rglob("*.md") if "results" not in p.relative_to(DOCS).parts]


def test_the_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert not INTERVAL.findall(text), "a measured interval typed into the README"
    assert "make test" in text and "make lab" in text
    for link in re.findall(r"\]\((docs/[^)#]+)", text):  # every link into the docs lands on a file
        assert (ROOT / link).is_file(), link


# A measurement said in prose: "12x slower", "measured 2.0 s", "took 2-3 s", "21.1 and 21.3 s".
SAID = re.compile(
    r"\b\d+(?:\.\d+)?x (?:slower|faster)\b"
    r"|\b(?:measured|took|takes|taking) (?:about |up to )?\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)? ?(?:s|ms|%)(?!\w)"
    r"|\b\d+(?:\.\d+)? and \d+(?:\.\d+)? ?(?:s|ms)(?!\w)"
)


def typed_figures(text: str, results: str) -> list[str]:
    """Figures in `text` that no results file holds: intervals, decimal ratios, and measurements
    said in words (whole-number ratios called faster or slower, seconds or shares measured)."""
    found = INTERVAL.findall(text) + RATIO.findall(text) + [m.group(0) for m in SAID.finditer(text)]
    return [figure for figure in found if figure not in results]


def test_every_figure_in_a_page_comes_from_a_results_file():
    results = "\n".join(p.read_text() for p in (DOCS / "results").rglob("*.md"))
    typed = [
        f"{p.relative_to(ROOT)}: {figure}"
        for p in pages()
        for figure in typed_figures(p.read_text(), results)
    ]
    assert not typed, "figures typed into the docs instead of read from docs/results/: " + "; ".join(typed)
    planted = [
        "a precision that is 12x slower on this CPU",
        "evaluating it, measured 2.0 s on a quiet machine",
        "the first FLOP count took 2-3 s here",
        "the job ends (21.1 and 21.3 s in the test's runs)",
        "a rule: 1.37x [1.02, 1.51] over 8 pairs",
    ]
    assert [bool(typed_figures(text, results)) for text in planted] == [True] * len(planted)
    assert typed_figures("with a margin, or 5x the slowest step seen", results) == []  # a rule, not a figure


def test_results_files_say_their_machine_and_sit_in_its_folder():
    for path in (DOCS / "results").rglob("*.md"):
        if path.name == "index.md":
            continue
        assert path.parent.parent == DOCS / "results", path  # docs/results/<machine>/<name>.md
        assert "Machine:" in path.read_text(), f"{path} does not name the machine it ran on"


def test_every_page_is_in_the_site_and_the_cli_reference_has_every_command():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in pages():
        assert str(page.relative_to(DOCS)) in nav, f"{page} is not in mkdocs.yml's nav"
    from tools import docs_hooks
    from workbench.cli import commands

    reference = docs_hooks.cli_reference()
    for name in commands():
        assert f"## workbench {name}\n" in reference and f"usage: workbench {name}" in reference
    for name in ("runs export", "loader make-images", "loader sweep"):  # subcommands have their own
        assert f"## workbench {name}\n" in reference and f"usage: workbench {name}" in reference
    assert wider_than_the_site(reference) == []
    assert wider_than_the_site("```text\n" + "x" * (docs_hooks.SITE_COLUMNS + 1) + "\n```\n") != []
    examples = {
        name: docs_hooks.example_of(name, sub, parent) for name, sub, parent in docs_hooks.cli_commands()
    }
    assert [name for name, example in examples.items() if not example] == ["loader"]  # only a group


def wider_than_the_site(markdown: str) -> list[str]:
    """Lines of code blocks that a page at 1280 px would clip."""
    from tools.docs_hooks import SITE_COLUMNS

    wide, inside = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside and len(line) > SITE_COLUMNS:
            wide.append(line)
    return wide


def test_the_configuration_reference_says_what_every_field_sets():
    from tools.docs_hooks import config_fields, config_reference
    from workbench.config import RunConfig

    fields = config_fields()
    assert len(fields) == sum(len(vars(section)) for section in vars(RunConfig.default()).values())
    assert [f["field"] for f in fields if not f["meaning"]] == []
    reference = config_reference()
    assert all(f"| `{f['field']}` |" in reference for f in fields)
    # a field whose comment is gone is found
    source = (ROOT / "workbench" / "config.py").read_text()
    planted = source.replace("lr: float = 1e-3  # the learning rate", "lr: float = 1e-3")
    assert planted != source
    assert [f["field"] for f in config_fields(planted) if not f["meaning"]] == ["optim.lr"]


def test_the_readmes_notebook_minutes_are_the_results_file_it_names():
    """The minutes column is written by `python -m tools.bench notebooks --both` from its results:
    the README names that file, and redrawing the table from the file's JSON changes nothing."""
    import json

    from tools.bench.notebooks import MINUTES_FROM, readme_with_minutes

    text = (ROOT / "README.md").read_text()
    named = MINUTES_FROM.search(text)
    assert named, "the README does not say which results file its notebook minutes come from"
    source = Path(named.group(2))
    report = json.loads((ROOT / source).with_suffix(".json").read_text())
    assert set(report["modes"]) == {"quiet", "busy"}
    assert readme_with_minutes(text, report, source) == text


def test_the_minutes_column_marks_a_disturbed_quiet_run_and_a_failed_one():
    from tools.bench.notebooks import readme_with_minutes

    readme = (
        "| notebook | what you learn |\n|---|---|\n| [`00_tour`](docs/labs/00_tour.md) | a tour |\n"
        "| [`01_x`](docs/labs/01_x.md) | x |\n\n## The command line at a glance\n"
    )

    def row(seconds, busy=False, errors=0, reason=""):
        return {"seconds": seconds, "machine_busy": busy, "error_cells": errors, "reason": reason}

    report = {
        "machine": {"summary": "a 2-core CPU"},
        "notebooks": {"00_tour": {"quiet": row(90, busy=True), "busy": row(150, errors=1)}},
    }
    drawn = readme_with_minutes(readme, report, Path("docs/results/m/notebooks-quiet-busy.md"))
    assert "| [`00_tour`](docs/labs/00_tour.md) | a tour | 1.5* / 2.5 (failed) |" in drawn
    assert "| [`01_x`](docs/labs/01_x.md) | x | - / - |" in drawn  # not in the report: kept as it was
    assert (
        "Minutes from [docs/results/m/notebooks-quiet-busy.md](docs/results/m/notebooks-quiet-busy.md)"
        in drawn
    )
    assert readme_with_minutes(drawn, report, Path("docs/results/m/notebooks-quiet-busy.md")) == drawn


# A command line as a page shows one: `workbench stack --rounds 6`, up to the end of its code span.
SHOWN_COMMAND = re.compile(r"workbench ([a-z][a-z-]*)([^`\n#|)\"]*)")


def _commands() -> dict:
    """'run', 'runs export', ...: every command and subcommand, with its parser."""
    from tools.docs_hooks import cli_commands

    return {name: p for name, p, _ in cli_commands()}


def unknown_flags(text: str, commands: dict) -> list[str]:
    """`workbench CMD --flag` in `text` where CMD (or `CMD SUB`) takes no such flag, or hides it (a
    removed flag is refused with its successor's name, never shown)."""
    found = []
    for m in SHOWN_COMMAND.finditer(text):
        name, rest = m.group(1), m.group(2)
        if name not in commands:
            continue  # prose: "the workbench chooses ..."
        first = rest.split()[:1]
        if first and f"{name} {first[0]}" in commands:
            name = f"{name} {first[0]}"
        shown = [a for a in commands[name]._actions if a.help != argparse.SUPPRESS]
        allowed = {o for a in shown for o in a.option_strings}
        flags = re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest)
        found += [f"workbench {name} {flag}" for flag in flags if flag not in allowed]
    return found


def test_every_command_line_a_page_or_notebook_shows_uses_flags_its_command_takes():
    commands = _commands()
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in [ROOT / "README.md", *pages()]}
    texts.pop("docs/changelog.md")  # it names removed flags on purpose
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        texts[str(nb.relative_to(ROOT))] = "\n".join("".join(c["source"]) for c in cells)
    bad = {where: unknown for where, text in texts.items() if (unknown := unknown_flags(text, commands))}
    assert bad == {}
    # a removed flag (hidden, refused with its successor) and one that never was are both found
    planted = "`workbench stack --changes bf16 --budget-s 3` then `workbench runs export RUN --to-json x`"
    assert unknown_flags(planted, commands) == [
        "workbench stack --budget-s",
        "workbench runs export --to-json",
    ]


PUBLIC = ("workbench", "workbench.tracking", "workbench.sinks")  # the packages a user imports from


def api_targets(page: str) -> list[str]:
    return re.findall(r"^::: ([\w.]+)", page, re.M)


def missing_from_api(page: str) -> list[str]:
    """Public classes and functions (the packages' __all__) that the API page names nowhere."""
    import importlib
    import inspect

    missing = []
    for package in PUBLIC:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and not re.search(rf"\b{name}\b", page):
                missing.append(f"{package}.{name}")
    return missing


def test_the_api_reference_names_every_public_object_and_each_has_a_docstring():
    import inspect

    page = (DOCS / "reference" / "api.md").read_text()
    assert missing_from_api(page) == []
    assert missing_from_api(page.replace("::: workbench.tracking.Run\n", "")) == ["workbench.tracking.Run"]
    undocumented = [t for t in api_targets(page) if not (inspect.getdoc(api_object(t)) or "").strip()]
    assert undocumented == []


def api_object(target: str):
    """The object a `::: dotted.name` line of the API page renders."""
    import importlib

    module_name, obj = target, None
    while obj is None:
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError:
            module_name, _, _ = module_name.rpartition(".")
    for attr in target[len(module_name) + 1 :].split(".") if target != module_name else []:
        obj = getattr(obj, attr)
    return obj


def parameters_without_a_row(name: str, obj) -> list[str]:
    """`obj`'s parameters (a class: its constructor's) that its docstring gives no `:param` line,
    so the site's parameter table of it leaves them out."""
    import inspect

    try:
        signature = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)
    except (TypeError, ValueError):
        return []
    doc = inspect.getdoc(obj) or ""
    return [
        f"{name}({p.name})"
        for p in signature.parameters.values()
        if p.name not in ("self", "cls")
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and f":param {p.name}:" not in doc
    ]


def test_every_parameter_on_the_api_page_has_a_row_in_its_table():
    import inspect

    page = (DOCS / "reference" / "api.md").read_text()
    missing = []
    for target, options in re.findall(r"^::: ([\w.]+)\n((?:    .*\n)*)", page, re.M):
        obj = api_object(target)
        listed = re.search(r"members: \[([^\]]*)\]", options)
        names = [n.strip() for n in listed.group(1).split(",")] if listed else []
        if inspect.ismodule(obj):
            shown = [(f"{target}.{n}", getattr(obj, n)) for n in names or getattr(obj, "__all__", [])]
        else:
            shown = [(target, obj), *((f"{target}.{n}", getattr(obj, n)) for n in names)]
        for name, member in shown:
            missing += parameters_without_a_row(name, member)
    assert missing == []

    def planted(a, b):
        """Compare a with b.

        :param a: one side.
        """

    assert parameters_without_a_row("planted", planted) == ["planted(b)"]


def test_every_lab_page_says_how_long_its_notebook_took_from_the_readmes_results_file():
    from tools.docs_hooks import lab_minutes

    readme = (ROOT / "README.md").read_text()
    for page in sorted((DOCS / "labs").glob("*.md")):
        assert "<!-- lab-minutes -->" in page.read_text(), page
        said = lab_minutes(page.stem)
        row = next((line for line in readme.splitlines() if f"[`{page.stem}`]" in line), "")
        quiet, busy = row.rstrip(" |").rsplit("| ", 1)[1].split(" / ")
        if quiet == busy == "-":
            assert said.startswith("not measured yet"), said
        else:  # the README's own figures, one rounding
            assert (
                said.startswith(f"{quiet.replace('*', '')} minutes quiet") and f" and {busy} beside" in said
            )


def test_every_lab_page_shows_its_notebook_and_its_key_figure_from_the_results():
    import pytest

    from tools import docs_hooks

    pages = sorted((DOCS / "labs").glob("*.md"))
    assert sorted(docs_hooks.KEY_FIGURES) == [p.stem for p in pages]
    for page in pages:
        text = page.read_text()
        assert "<!-- lab-picture -->" in text and "<!-- lab-key-figure -->" in text, page
        picture = docs_hooks.lab_picture(page.stem)
        assert picture.startswith(f"![Notebook {page.stem}"), picture  # taken, not missing
        assert (DOCS / "images" / "labs" / f"{page.stem}.jpg").stat().st_size < 300_000  # kept small
        figure = docs_hooks.lab_key_figure(page.stem)
        quoted = figure.split("```text\n")[1].split("\n```")[0]
        source = docs_hooks.readme_results().parent / f"{docs_hooks.KEY_FIGURES[page.stem][0]}.md"
        # the quoted line is in its results file, word for word (a table row: each cell quoted)
        words, held = " ".join(quoted.split()), " ".join(source.read_text().split())
        assert all(cell in held for cell in words.split(" · ")), page
    # planted: a line no results file holds stops the build
    planted = dict(docs_hooks.KEY_FIGURES, **{"00_tour": ("dashboard", "no such line", "nothing")})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(docs_hooks, "KEY_FIGURES", planted)
        with pytest.raises(ValueError, match="no line starting 'no such line'"):
            docs_hooks.lab_key_figure("00_tour")
    assert docs_hooks.lab_picture("no_such_notebook").startswith("No picture of this notebook yet")


def test_results_pages_read_at_the_sites_width_with_their_tables_as_tables():
    from tools.docs_hooks import readable_results

    for path in sorted((DOCS / "results").rglob("*.md")):
        assert wider_than_the_site(readable_results(path.read_text())) == [], path
    printed = (
        "```text\nthe curve:\n\n| side | ratio |\n|---|---|\n| 32 | 0.27x |\n\n" + "word " * 40 + "\n```\n"
    )
    shown = readable_results(printed)
    assert "```\n\n| side | ratio |\n|---|---|\n| 32 | 0.27x |\n\n```text\n" in shown
    assert wider_than_the_site(shown) == [] and wider_than_the_site(printed) != []


def long_sections(text: str, most: int = 300) -> list[str]:
    """Headings whose text runs past `most` words (code blocks and tables not counted)."""
    found, title, words, inside = [], "(top)", 0, False
    for line in [*text.splitlines(), "# (end)"]:
        if line.startswith("```"):
            inside = not inside
        elif inside or line.lstrip().startswith("|"):
            continue
        elif re.match(r"#{1,6} ", line):
            if words > most:
                found.append(f"{title} ({words} words)")
            title, words = line.lstrip("# "), 0
        else:
            words += len(line.split())
    return found


def test_no_section_of_a_page_runs_past_300_words():
    long = {
        str(p.relative_to(ROOT)): found
        for p in pages()
        if p.name != "changelog.md" and (found := long_sections(p.read_text()))
    }
    assert long == {}
    assert long_sections("# A page\n\n" + "word " * 301) == ["A page (301 words)"]


def test_no_code_line_of_a_page_is_wider_than_the_site():
    wide = {
        str(p.relative_to(ROOT)): w
        for p in pages()
        if "results" not in p.parts and (w := wider_than_the_site(p.read_text()))
    }
    assert wide == {}


def test_the_configuration_reference_lists_every_environment_variable_the_package_reads():
    read = set()
    for path in (ROOT / "workbench").rglob("*.py"):
        read |= set(
            re.findall(r"\"(WORKBENCH_[A-Z_]+|OMP_WAIT_POLICY|ONEDNN_MAX_CPU_ISA)\"", path.read_text())
        )
    page = (DOCS / "reference" / "config.md").read_text()
    listed = set(re.findall(r"^\| `([A-Z_]+)` \|", page, re.M))
    assert len(read) >= 10 and read - listed == set()
    planted = set(re.findall(r"^\| `([A-Z_]+)` \|", page.replace("| `WORKBENCH_CACHE` |", "| cache |"), re.M))
    assert read - planted == {"WORKBENCH_CACHE"}
