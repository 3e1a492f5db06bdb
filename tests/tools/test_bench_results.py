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
