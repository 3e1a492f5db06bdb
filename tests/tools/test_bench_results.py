"""A benchmark's results file (tools/bench/results.py): what a printing benchmark shows becomes its
file, with the machine and the load, in this machine's folder; a failed one writes nothing."""

from __future__ import annotations

from tools.bench import results


def test_what_a_benchmark_prints_becomes_its_results_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(results, "results_file", lambda name: tmp_path / "some-machine" / f"{name}.md")

    @results.recorded("demo", "A demonstration")
    def main(argv=None) -> int:
        print("variant  ratio\nA        1.20x [1.10, 1.30]")
        return 0

    @results.recorded("broken", "A benchmark that failed")
    def failing(argv=None) -> int:
        print("half a table")
        return 1

    assert main([]) == 0 and failing([]) == 1
    shown = capsys.readouterr().out
    assert "1.20x [1.10, 1.30]" in shown and "half a table" in shown  # shown as it went
    text = (tmp_path / "some-machine" / "demo.md").read_text()
    # the exact command that wrote it, then the machine
    assert text.startswith("# A demonstration\n\nCommand: `python -m tools.bench demo`\n\nMachine: ")
    assert "```text\nvariant  ratio\nA        1.20x [1.10, 1.30]\n```" in text
    assert "Load during the run: programs outside this benchmark's processes held" in text
    assert not (tmp_path / "some-machine" / "broken.md").exists()


def test_results_land_in_this_machines_folder():
    path = results.results_file("demo")
    assert path.parts[:2] == ("docs", "results") and path.parent.name == results.machine_slug()


def test_every_recorded_benchmark_records_its_main():
    """`recorded` wraps the function `python -m tools.bench NAME` calls: on a helper, the
    benchmark wrote no file and the helper was called with main's arguments (planted below)."""
    import ast
    from pathlib import Path

    def recorded_functions(source: str) -> list[str]:
        return [
            node.name
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef)
            and any("recorded" in ast.unparse(d) for d in node.decorator_list)
        ]

    bench = Path(results.__file__).parent
    wrapped = {p.name: recorded_functions(p.read_text()) for p in bench.glob("*.py")}
    assert {name: f for name, f in wrapped.items() if f and f != ["main"]} == {}
    assert recorded_functions('@recorded("x", "y")\ndef two_servers():\n    pass\n') == ["two_servers"]


# written before results files named their command, and not rerun yet: the notebooks with their
# defaults, quiet and busy (about 45 minutes of a quiet machine), and the tune beside two busy
# processes (about 20). Each name goes once its file is rerun: the test fails on a waiting file
# that names its command
WAITING = {
    "docs/results/amd-epyc-2-cores-avx2/notebooks-quiet-busy.md",
    "docs/results/unrecorded-x86-64-2-cores/tunes-busy.md",
}


def test_every_results_file_names_the_command_that_wrote_it_and_only_what_exists():
    """Each file under docs/results/ says which benchmark wrote it (a module that exists), the
    machine and the load, and names no module or folder the repository does not hold (planted)."""
    import re
    from pathlib import Path

    repo = Path(results.__file__).resolve().parents[2]
    benchmarks = {p.stem for p in (repo / "tools" / "bench").glob("*.py") if not p.stem.startswith("_")}

    def faults(text: str) -> list[str]:
        found = []
        command = re.search(r"^Command: `python -m tools\.bench (\w+)", text, re.M)
        if not command or command.group(1) not in benchmarks:
            found.append("no command of an existing benchmark")
        if "Machine" not in text or "Load during the run" not in text:
            found.append("no machine or load")
        found += [m for m in re.findall(r"python -m ([\w.]+)", text) if m != "tools.bench"]
        found += [p for p in re.findall(r"\b(runs/[\w./-]+)", text) if not (repo / p).exists()]
        return found

    files = sorted((repo / "docs" / "results").glob("*/*.md"))
    found = {str(p.relative_to(repo)): faults(p.read_text()) for p in files}
    waiting = {name: found.pop(name) for name in WAITING}
    assert all("no command of an existing benchmark" in said for said in waiting.values()), waiting
    assert found == {name: [] for name in found}
    assert faults("# Old\n\nMeasured by `python -m workbench.bench commands`, see runs/trials/x") == [
        "no command of an existing benchmark",
        "no machine or load",
        "workbench.bench",
        "runs/trials/x",
    ]


def test_each_benchmark_of_one_process_reports_the_load_of_its_own_run(monkeypatch):
    """`python -m tools.bench` runs the benchmarks one after another in one process: the load
    line of each covers its own run (from its start), not the ones before it (planted: without
    the restart, the second benchmark's window starts where the first's did)."""
    import types

    from tools.bench import __main__ as bench_main

    starts = []

    def fake(name):
        def main(options):
            starts.append(results._SINCE_START._t0)
            return 0

        return types.SimpleNamespace(main=main)

    monkeypatch.setattr(bench_main.importlib, "import_module", fake)
    monkeypatch.setattr(bench_main, "NAMED_ONLY", set())
    assert bench_main.main(["allocator", "compress"]) == 0
    assert len(starts) == 2 and starts[1] > starts[0]
    starts.clear()
    monkeypatch.setattr(bench_main, "benchmark_starts", lambda: None)
    bench_main.main(["allocator", "compress"])
    assert starts[1] == starts[0]
