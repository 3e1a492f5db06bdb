"""Where a benchmark's results go: docs/results/<this machine>/<name>.md (and .json), with the
machine's report, the load the run met and the time it was written, so results from different
machines stay side by side and prose never types a figure."""

from __future__ import annotations

import contextlib
import datetime
import functools
import io
import json
import platform
import shlex
import sys
from pathlib import Path

from workbench.machine.contention import ContentionMeter
from workbench.machine.cpu import cpu_info, isa_text
from workbench.quick import quick


def machine() -> dict:
    info = cpu_info()
    avx512, amx = info["flags"]["avx512f"], info["flags"]["amx_tile"]
    return {
        "cpu": info["model"],
        "usable_cores": info["usable_cpus"],
        "logical_cpus": info["logical_cpus"],
        "avx512": avx512,
        "amx": amx,
        "flags": sorted(f for f, on in info["flags"].items() if on),
        "capped": info["capped"],
        "torch_kernels": info["torch_cpu_capability"],
        "summary": f"{info['model']}, {info['usable_cpus']} usable of {info['logical_cpus']} cores, "
        f"AVX-512 {'yes' if avx512 else 'no'}, AMX {'yes' if amx else 'no'}"
        + (
            f" (instruction sets: {isa_text(info)}; torch kernels: {info['torch_cpu_capability']})"
            if info["capped"]
            else ""
        ),
    }


def machine_line() -> str:
    """This machine as a results file names it: the CPU, its cores and instruction sets, torch."""
    import torch

    m = machine()
    return (
        f"{m['summary']}, instruction sets {', '.join(m['flags']) or 'none of note'}, torch "
        f"{torch.__version__} ({m['torch_kernels']} kernels), {platform.platform()}"
    )


# what other programs did while this benchmark ran: from its start to the writing of its results
_SINCE_START = ContentionMeter()


def benchmark_starts() -> None:
    """The load a results file reports is its own benchmark's, also when several run one after
    another in one process (`python -m tools.bench` with no names): the window starts again."""
    _SINCE_START.restart()


def machine_slug() -> str:
    """This machine's folder under docs/results/: its CPU, usable cores and widest vector units,
    so results from different machines stay side by side instead of replacing each other."""
    m = machine()
    units = "amx" if m["amx"] else "avx512" if m["avx512"] else "avx2" if "avx2" in m["flags"] else "base"
    cpu = "-".join("".join(c if c.isalnum() else " " for c in m["cpu"].lower()).split()[:4])
    return f"{cpu}-{m['usable_cores']}-cores-{units}"


def results_file(name: str) -> Path:
    """Where a benchmark writes its results by default: docs/results/<this machine>/<name>.md."""
    return Path("docs") / "results" / machine_slug() / f"{name}.md"


def bench_command(name: str, argv: list[str] | None) -> str:
    """The command that reruns benchmark `name` with the options it was given (`argv`; None: this
    process's own arguments after the module, as when the benchmark's module was run itself)."""
    options = sys.argv[1:] if argv is None else argv
    return shlex.join(["python", "-m", "tools.bench", name, *options])


def write_results(
    lines: list[str], out: str | Path, command: str, data: dict | None = None, echo: bool = True
) -> None:
    """A benchmark's results file: its lines (a title first) with the `command` that wrote them under
    the title, printed (unless already shown: `echo`) and written to `out` (folders made), with the
    figures they came from beside it as JSON when given."""
    load = _SINCE_START.read()
    shrunk = (
        " Quick mode (WORKBENCH_QUICK): the work was shrunk, these are not the defaults." if quick() else ""
    )
    lines = [
        lines[0],
        "",
        f"Command: `{command}`",
        *lines[1:],
        "",
        f"Load during the run: programs outside this benchmark's processes held "
        f"{load['other_cpu_cores']:.2f} cores on average, the hypervisor took "
        f"{load['steal_frac']:.1%} as steal, 1-minute load average at the end "
        f"{load['load_avg_1m']}; written {datetime.datetime.now():%Y-%m-%d %H:%M}.{shrunk}",
    ]
    text = "\n".join(lines)
    if echo:
        print(text)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    if data is not None:
        out.with_suffix(".json").write_text(json.dumps(data, indent=1, default=str) + "\n")


class _Both(io.TextIOBase):
    """Writes to the terminal as it goes and keeps a copy."""

    def __init__(self, shown, kept: io.StringIO):
        self.shown, self.kept = shown, kept

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.shown.write(text)

    def flush(self) -> None:
        self.shown.flush()


def recorded(name: str, title: str):
    """For a benchmark whose `main` prints its tables: what it prints, shown as it goes, becomes
    its results file docs/results/<this machine>/<name>.md under `title`, with the machine's report
    and the load it met, once main has ended with 0."""

    def wrap(main):
        @functools.wraps(main)
        def run(argv=None) -> int:
            kept = io.StringIO()
            with contextlib.redirect_stdout(_Both(sys.stdout, kept)):
                code = main(argv)
            if code == 0:
                write_results(
                    [
                        f"# {title}",
                        "",
                        f"Machine: {machine_line()}",
                        "",
                        "```text",
                        kept.getvalue().strip("\n"),
                        "```",
                    ],
                    results_file(name),
                    bench_command(name, argv),
                    echo=False,
                )
            return code

        return run

    return wrap
