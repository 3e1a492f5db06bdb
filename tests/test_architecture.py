"""The package's layout rules, read from its imports (every import, at module level or inside a
function): folders follow the process that runs their code, imports point down, no cycles, nothing
inside a rank imports the launcher, every folder says what it holds, only the run-folder module
names a run folder's files, and only the events module spells the kinds of record a rank writes and
the fields readers compute with."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"
HARNESSES = ("tools",)  # the benchmarks, the GPU check, the local cluster: run from the checkout
# Floors, top to bottom; a unit is a folder of the package or a module at its top.
FLOORS = {
    "faces": ["ui", "cli", "worker", "loopback", "__main__", "__init__"],
    "labs": [
        "compress",
        "loading",
        "hardware",
        "stacking",
        "export",
        "trials",
        "profile",
        "tune",
        "sinks",
        "integrations",
        "serving",
    ],
    "distributed": ["distributed"],
    "train": ["train", "tracking"],
    "machine": ["machine"],
    "base": [
        "config",
        "cache",
        "disk",
        "events",
        "provenance",
        "runfolder",
        "runstore",
        "measure",
        "net",
        "procs",
        "quick",
    ],
}
LEVEL = {unit: len(FLOORS) - i for i, units in enumerate(FLOORS.values()) for unit in units}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules `name` imports, anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in known and t != name}
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of a directed graph, as a path that ends where it starts, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(edges):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_every_unit_has_a_floor():
    units = {unit(m) for m in modules()}
    assert units <= set(LEVEL), f"place these in FLOORS: {sorted(units - set(LEVEL))}"


def test_no_module_import_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_cycle_between_folders():
    folders: dict[str, set[str]] = {}
    for a, targets in graph().items():
        folders.setdefault(unit(a), set()).update(unit(b) for b in targets if unit(b) != unit(a))
    cycle = find_cycle(folders)
    assert cycle is None, "folders import each other: " + " -> ".join(cycle)


def test_imports_point_down():
    upward = [
        f"{a} imports {b}"
        for a, targets in graph().items()
        for b in targets
        if LEVEL[unit(b)] > LEVEL[unit(a)]
    ]
    assert not upward, "imports that point up a floor:\n" + "\n".join(sorted(upward))


@pytest.mark.parametrize("room", ["train", "machine", *FLOORS["base"]])
def test_a_rank_never_imports_the_launcher(room):
    """What runs inside a rank (and what it stands on) never imports what owns the ranks."""
    bad = [
        f"{a} imports {b}"
        for a, targets in graph().items()
        if unit(a) == room
        for b in targets
        if unit(b) == "distributed"
    ]
    assert not bad, "\n".join(bad)


def test_the_package_never_imports_a_harness():
    """What a user installs stands alone: the benchmarks, the GPU check and the local cluster in
    tools/ import the package, never the reverse."""
    bad = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            bad += [f"{name} imports {n}" for n in names if n.split(".")[0] in HARNESSES]
    assert not bad, "\n".join(bad)


def test_the_wheel_ships_the_package_and_no_harness(tmp_path):
    """Built as `pip install .` builds it, from a copy of the checkout's package, tools and
    packaging files (the checkout itself is left untouched)."""
    root = PACKAGE.parent
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, tmp_path / name)
    for name in ("workbench", *HARNESSES):
        shutil.copytree(root / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    tops = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    assert "workbench" in tops and not tops & set(HARNESSES), sorted(tops)
    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("workbench/")}
    assert "workbench/distributed/clusters.py" in shipped
    assert not {n for n in shipped if re.search(r"/(bench|gpucheck)/|localslurm|netns", n)}


def test_every_folder_says_what_lives_there():
    for init in PACKAGE.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 60, f"{init.relative_to(PACKAGE.parent)} needs its docstring"


def test_no_two_modules_share_a_name():
    """A name says which module it is without its folder: `memory.py` in three rooms was three jobs."""
    seen: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py":
            seen.setdefault(path.stem, []).append(str(path.relative_to(PACKAGE)))
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}


def test_every_module_imports():
    """Every module is reached at least this far, and every name a package exports resolves (the
    lazy ones too): one that no other test runs cannot be left broken unseen by a rename."""
    import importlib

    for name in modules():
        if not name.endswith("__main__"):  # the command line itself: it runs on import
            module = importlib.import_module(name)
            for exported in getattr(module, "__all__", ()):
                assert getattr(module, exported) is not None, (name, exported)


def _run_folder_names() -> set[str]:
    """Every file name workbench.runfolder defines, and the fixed parts of its per-rank patterns."""
    from workbench import runfolder

    names = {
        v
        for k, v in vars(runfolder).items()
        if k.isupper() and isinstance(v, str) and "." in v or k in ("TORCHRUN_LOGS",)
    }
    # "rank" and ".json" alone are too common to tell a run folder's file from anything else
    parts = {part for name in names if "{rank}" in name for part in name.split("{rank}") if len(part) >= 6}
    return {name for name in names if "{rank}" not in name} | parts


def test_only_the_run_folder_module_names_run_folder_files():
    """A run folder's file names are written once, in workbench/runfolder.py: a string that is one of
    them (or the fixed part of a per-rank name, as in f"rank{r}.jsonl") anywhere else fails."""
    names = _run_folder_names()
    assert {"config.json", "summary.json", "launch.json", ".jsonl"} <= names
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "runfolder.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value!r}")
    assert not found, "name these through workbench.runfolder:\n" + "\n".join(found)


def _is_kind_key(node: ast.AST) -> bool:
    """The key "event", spelled, or named as workbench.events names it (EVENT, events.EVENT)."""
    return (
        isinstance(node, ast.Constant)
        and node.value == "event"
        or isinstance(node, ast.Name)
        and node.id == "EVENT"
        or isinstance(node, ast.Attribute)
        and node.attr == "EVENT"
    )


def _is_event_field(node: ast.AST) -> bool:
    """rec["event"] or rec.get("event"), the key spelled or named."""
    if isinstance(node, ast.Subscript):
        return _is_kind_key(node.slice)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and _is_kind_key(node.args[0])
    return False


def _is_event_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "event"  # a profiler's event is one too


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_only_the_events_module_spells_the_kinds_of_record():
    """A rank's records are told apart by their `event` field; its values are named once, in
    workbench/events.py (START, STEP, DONE, ...). Comparing the field with a string, or writing a
    record whose kind is a string, anywhere else fails."""
    from workbench import events

    kinds = {
        events.START,
        events.INIT,
        events.READY,
        events.STEP,
        events.RESUMED,
        events.DONE,
        events.ERROR,
        events.HEARTBEAT,
    }
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "events.py" and path.parent == PACKAGE:
            continue
        where = path.relative_to(PACKAGE.parent)
        for node in ast.walk(ast.parse(path.read_text())):
            sides = [node.left, *node.comparators] if isinstance(node, ast.Compare) else []
            if any(map(_is_event_field, sides)):  # every string it is compared with
                found += [
                    f"{where}:{node.lineno}: {s!r}"
                    for side in sides
                    if not _is_event_field(side)
                    for s in _strings(side)
                ]
            elif any(map(_is_event_name, sides)):  # a variable: the strings that are kinds
                found += [
                    f"{where}:{node.lineno}: {s!r}" for side in sides for s in _strings(side) if s in kinds
                ]
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "write"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in kinds
            ):
                found.append(f"{where}:{node.lineno}: {node.args[0].value!r}")
    assert not found, "name these through workbench.events (or the sweep's own constants):\n" + "\n".join(
        found
    )


# Field names too common to keep out of every dict: a plot's top margin is "t", a GPU's process
# listing has "pid", and "status"/"message" say how anything went. Readers of records still name
# them through workbench.events; the rule leaves them out.
COMMON_WORDS = {"t", "pid", "status", "message"}


def _key_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """Strings used as a dict's key: {"k": ...}, d["k"], d.get/pop/setdefault("k"), "k" in d, and
    the keywords of dict(k=...) and d.update(k=...)."""

    def text(n):
        return n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) else None

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            out += [(node.lineno, text(k)) for k in node.keys if k is not None and text(k)]
        elif isinstance(node, ast.Subscript) and text(node.slice):
            out.append((node.lineno, text(node.slice)))
        elif (
            isinstance(node, ast.Compare) and text(node.left) and isinstance(node.ops[0], (ast.In, ast.NotIn))
        ):
            out.append((node.lineno, text(node.left)))
        elif isinstance(node, ast.Call):
            func = node.func
            method = func.attr if isinstance(func, ast.Attribute) else None
            if method in ("get", "pop", "setdefault") and node.args and text(node.args[0]):
                out.append((node.lineno, text(node.args[0])))
            if method == "update" or isinstance(func, ast.Name) and func.id == "dict":
                out += [(node.lineno, k.arg) for k in node.keywords if k.arg]
    return out


def test_only_the_events_module_spells_the_fields_of_a_record():
    """The fields of a rank's records (step, loss, samples_per_s, rank, ...) are named once, in
    workbench/events.py; a summary or table that carries the same figure uses the same name. One of
    them spelled as a dict key anywhere else fails, naming the file and line."""
    from workbench import events

    names = set(events.KEYS) - COMMON_WORDS
    assert {"step", "loss", "samples_per_s", "rank", "attempt", "mfu", "rss_gib", "last"} <= names
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "events.py" and path.parent == PACKAGE:
            continue
        where = path.relative_to(PACKAGE.parent)
        found += [
            f"{where}:{line}: {key!r}"
            for line, key in _key_literals(ast.parse(path.read_text()))
            if key in names
        ]
    assert not found, "name these through workbench.events:\n" + "\n".join(found)


def test_the_field_rule_sees_every_way_of_spelling_a_key():
    code = """
a = {"loss": 1}
b = r["step"]
c = r.get("mfu")
d = "rss_gib" in r
e = dict(rank=0)
r.update(attempt=1)
f = r.pop("last")
g = {LOSS: 1, "other": 2}
"""
    keys = sorted(key for _, key in _key_literals(ast.parse(code)))
    assert keys == ["attempt", "last", "loss", "mfu", "other", "rank", "rss_gib", "step"]


def _alternates_an_order(node: ast.AST) -> bool:
    """`x % 2 == 0` (a round's parity) or `[::-1]` (a reversed order): what a rounds loop is made of."""
    if isinstance(node, ast.Compare) and isinstance(node.left, ast.BinOp):
        b = node.left
        return isinstance(b.op, ast.Mod) and isinstance(b.right, ast.Constant) and b.right.value == 2
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
        step = node.slice.step
        return (
            isinstance(step, ast.UnaryOp)
            and isinstance(step.operand, ast.Constant)
            and step.operand.value == 1
            and node.slice.lower is None
            and node.slice.upper is None
        )
    return False


def test_one_place_alternates_the_order_of_rounds():
    """Every comparison interleaves through the trial engine, whose order is workbench.measure.order's
    (a host's interleaved steps ask it too): a second rounds loop, alternating an order by a round's
    parity or by reversing it, fails here."""
    engine = PACKAGE / "measure" / "order.py"
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for loop in (n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.Assign, ast.Return))):
            # a loop's order reversed, or an order chosen by a round's parity
            source = loop.iter if isinstance(loop, ast.For) else loop.value or ast.Pass()
            seen = [n for n in ast.walk(source) if _alternates_an_order(n)]
            if seen if isinstance(loop, ast.For) else any(isinstance(n, ast.Compare) for n in seen):
                found.append(f"{path.relative_to(PACKAGE)}:{loop.lineno}")
    assert [f for f in found if not f.startswith(str(engine.relative_to(PACKAGE)))] == [], found
    assert found, "the engine's own alternation is no longer seen: the rule reads nothing"


def test_the_rounds_rule_sees_a_second_loop():
    code = "for r in range(4):\n    for v in (a if r % 2 == 0 else a[::-1]):\n        pass\n"
    loops = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.For)]
    assert any(_alternates_an_order(n) for n in ast.walk(loops[1].iter))


def test_one_place_says_how_many_warm_up_steps_every_figure_leaves_out():
    """The warm-up rule lives in workbench.measure.warmup; a second copy of its arithmetic could
    drift, and two figures of one run would leave out different steps."""
    rule = re.compile(r"//\s*5\s*,\s*10\s*\)")
    copies = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if rule.search(p.read_text()) and p != PACKAGE / "measure" / "warmup.py"
    ]
    assert copies == []
