"""Every notebook's plan fits the machine and quick mode shrinks sizes only.

A notebook's plan is its cells tagged "plan": the cells that build what it will run (configs, the
stacking changes, the ranks and loader workers) and run nothing long. They are executed here on a
faked 1-core and 2-core machine, with WORKBENCH_QUICK on and off: every config they build (and every
step of a stacking plan that will run) must be one the launch accepts (workbench.machine.fit), and
quick mode must plan the same models, data, precisions, ranks, workers and steps as the defaults.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

from workbench.config import RunConfig
from workbench.machine.fit import cannot_run
from workbench.stacking.plan import plan

NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))
CPU = torch.device("cpu")


def plan_cells(path: Path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    return [
        "".join(c["source"])
        for c in cells
        if c["cell_type"] == "code" and "plan" in c.get("metadata", {}).get("tags", [])
    ]


def paths(cfg: RunConfig) -> tuple:
    """What a config runs, beside its sizes: the things quick mode may not change."""
    return (
        cfg.model.name,
        cfg.data.name,
        cfg.precision.dtype,
        cfg.precision.channels_last,
        cfg.precision.tf32,
        cfg.compile.enabled,
        cfg.distributed.nproc,
        cfg.distributed.nnodes,
        cfg.loader.num_workers,
        cfg.run.threads,
        cfg.run.oversubscribe,
        cfg.optim.name,
    )


def notebook_plan(path: Path, quick: bool, cores: int, fake_cores, monkeypatch, tmp_path) -> dict:
    fake_cores(cores)
    monkeypatch.setenv("WORKBENCH_QUICK", "1" if quick else "0")
    monkeypatch.chdir(tmp_path)
    ns: dict = {"display": lambda *a, **k: None}
    for source in plan_cells(path):
        exec(compile(source, f"{path.name}[plan]", "exec"), ns)  # noqa: S102 - the project's notebooks
    configs = {k: v for k, v in ns.items() if isinstance(v, RunConfig)}
    if "RANKS" in ns:
        configs["cfg with RANKS"] = ns["cfg"].replace(**{"distributed.nproc": ns["RANKS"]})
    if "with_workers" in ns:
        configs["base with_workers"] = ns["base"].replace(**ns["with_workers"])
    stacking = []
    if "changes" in ns:
        for i, step in enumerate(plan(ns["baseline"], ns["changes"])):
            configs[f"stacking step {i}"] = step.config
            stacking.append((step.change.label, step.reason is None))
    return {
        "configs": configs,
        "stacking": stacking,
        "counts": {k: ns[k] for k in ("RANKS", "WORKERS") if k in ns},
    }


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_has_a_plan(path):
    assert plan_cells(path), f"{path.name} tags no cell 'plan'"


# what measures or runs: a plan cell builds what later cells run, and runs none of it (executed
# four times here, a lesson in a plan cell once cost this file 14 minutes)
MEASURES = {"precision_lesson", "ceilings_lesson", "size_curve", "run", "profile", "ab_test", "serve_all"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_plan_cell_runs_nothing(path):
    for source in plan_cells(path):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", getattr(node.func, "attr", ""))
                assert name not in MEASURES, f"{path.name}: a plan cell calls {ast.unparse(node)}"


@pytest.mark.parametrize("cores", [1, 2])
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_plan_launches_here_and_quick_mode_plans_the_same(path, cores, fake_cores, monkeypatch, tmp_path):
    plans = {q: notebook_plan(path, q, cores, fake_cores, monkeypatch, tmp_path) for q in (False, True)}
    for q, p in plans.items():
        for name, cfg in p["configs"].items():
            assert cannot_run(cfg, CPU) is None, f"{path.name} ({'quick' if q else 'defaults'}): {name}"
    default, quick = plans[False], plans[True]
    assert {k: paths(v) for k, v in quick["configs"].items()} == {
        k: paths(v) for k, v in default["configs"].items()
    }
    assert quick["stacking"] == default["stacking"] and quick["counts"] == default["counts"]


def _code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_quick_mode_scales_numbers_only(path):
    """scaled(default, quick) takes numbers (a scaled list would change what runs), and quick()
    decides no branch: it may only be shown or passed on as a size switch."""
    tree = ast.parse("\n".join(line for line in _code(path).splitlines() if not line.startswith(("%", "!"))))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "scaled":
            for arg in node.args:
                assert isinstance(arg, (ast.Constant, ast.Call, ast.BinOp, ast.Name)) and not (
                    isinstance(arg, ast.Constant) and not isinstance(arg.value, (int, float))
                ), f"{path.name}: scaled() with {ast.unparse(arg)}"
        if isinstance(node, (ast.If, ast.IfExp)):
            assert "quick()" not in ast.unparse(node.test), f"{path.name}: branches on quick()"
