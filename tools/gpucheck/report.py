"""The GPU check's one report: DIR/gpucheck.json (every figure, the versions, each part's status and
time, the goals) and the short table printed at the end. The schema is checked on every write and
read, so a report brought back from a GPU machine is known to hold what the table shows.

    rep = read_report("gpucheck-out")          # the dict; ValueError naming what is missing
    print(format_table(rep))
"""

from __future__ import annotations

import json
import math
import platform
import sys
import time
from pathlib import Path

from .goals import judge
from .probe import package_versions
from .runner import FAILED, HUNG, INTERRUPTED, OK, SKIPPED, STATUSES, TIMED_OUT

FILE = "gpucheck.json"
SCHEMA = 1
NUM = (int, float)
TOP = {
    "schema": int,
    "status": str,
    "reason": str,
    "created": str,
    "wall_s": NUM,
    "budget_s": NUM,
    "versions": dict,
    "device": dict,
    "parts": list,
    "goals": list,
}
PART = {
    "name": str,
    "status": str,
    "seconds": NUM,
    "limit_s": NUM,
    "what": str,
    "error": str,
    "summary": str,
    "figures": dict,
    "items": list,
}
ITEM = {"name": str, "status": str}
GOAL = {"goal": str, "target": str, "measured": str, "result": str, "note": str}
VERSIONS = ("python", "torch", "cuda", "driver", "packages")  # present in every report (None: unknown)
REPORT_STATUSES = ("skipped", "running", OK, FAILED, INTERRUPTED, HUNG)


def _typed(where: str, d, spec: dict) -> list[str]:
    if not isinstance(d, dict):
        return [f"{where} must be an object, got {type(d).__name__}"]
    out = []
    for key, kind in spec.items():
        if key not in d:
            out.append(f"{where}.{key} is missing")
        elif isinstance(d[key], bool) or not isinstance(d[key], kind):
            out.append(f"{where}.{key} must be {getattr(kind, '__name__', 'a number')}, got {d[key]!r:.60}")
    return out


def schema_problems(rep) -> list[str]:
    """What is missing or mistyped in a report (empty: it is sound)."""
    problems = _typed("report", rep, TOP)
    if problems:
        return problems
    if rep["status"] not in REPORT_STATUSES:
        problems.append(f"report.status must be one of {', '.join(REPORT_STATUSES)}, got {rep['status']!r}")
    problems += [f"report.versions.{k} is missing" for k in VERSIONS if k not in rep["versions"]]
    for i, part in enumerate(rep["parts"]):
        found = _typed(f"parts[{i}]", part, PART)
        problems += found
        if found:
            continue
        if part["status"] not in STATUSES:
            problems.append(f"parts[{i}].status must be one of {', '.join(STATUSES)}, got {part['status']!r}")
        for j, item in enumerate(part["items"]):
            problems += _typed(f"parts[{i}].items[{j}]", item, ITEM)
    for i, goal in enumerate(rep["goals"]):
        problems += _typed(f"goals[{i}]", goal, GOAL)
    return problems


def validate(rep) -> dict:
    problems = schema_problems(rep)
    if problems:
        raise ValueError(f"{FILE} does not hold a sound report: " + "; ".join(problems[:6]))
    return rep


def clean(value):
    """JSON without NaN or infinity (None instead), paths and other objects as text."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def write_report(out_dir: str | Path, rep: dict) -> Path:
    """Check the schema and write DIR/gpucheck.json atomically (a reader never sees half a file)."""
    rep = validate(clean(rep))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(rep, indent=2, allow_nan=False))
    tmp.replace(path)
    return path


def read_report(path: str | Path) -> dict:
    path = Path(path)
    path = path / FILE if path.is_dir() else path
    return validate(json.loads(path.read_text()))


def versions() -> dict:
    """Python, torch, CUDA, cuDNN and the driver, and the other packages' versions. torch and NVML are
    asked only when torch is already imported (the skip path never imports it)."""
    packages = package_versions()
    out = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": packages.get("torch"),
        "cuda": None,
        "cudnn": None,
        "driver": None,
        "driver_cuda": None,
        "packages": packages,
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        from workbench.machine.cpu import safe
        from workbench.machine.gpu import gpu_info

        info = safe(gpu_info, {}) or {}
        out.update(
            torch=torch.__version__,
            cuda=torch.version.cuda,
            cudnn=safe(torch.backends.cudnn.version),
            driver=info.get("driver"),
            driver_cuda=info.get("driver_cuda"),
        )
    return out


def skipped_report(reason: str, budget_s: float) -> dict:
    return {
        "schema": SCHEMA,
        "status": "skipped",
        "reason": reason,
        "created": _now(),
        "wall_s": 0.0,
        "budget_s": budget_s,
        "versions": versions(),
        "device": {},
        "parts": [],
        "goals": [],
    }


def assemble(meta: dict, records: list, wall_s: float, final: bool = True) -> dict:
    """The report from the parts' records: `meta` holds created, budget_s, versions and device."""
    parts = [r.as_dict() for r in records]
    for p in parts:
        if p["status"] == "pending":
            p["status"] = SKIPPED
            p["error"] = "not reached: the check ended before this part" if final else "not reached yet"
    bad = [p for p in parts if p["status"] in (FAILED, TIMED_OUT, HUNG, INTERRUPTED)]
    status = "running" if not final else (FAILED if bad else OK)
    if any(p["status"] == INTERRUPTED for p in parts):
        status = INTERRUPTED
    if any(p["status"] == HUNG for p in parts):
        status = HUNG
    return {
        "schema": SCHEMA,
        "status": status,
        "reason": "",
        "wall_s": round(wall_s, 2),
        **meta,
        "parts": parts,
        "goals": judge(parts, meta.get("device", {}).get("name", "")),
    }


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %z")


def format_table(rep: dict) -> str:
    """The short table printed at the end of a check."""
    v, d = rep["versions"], rep["device"]
    if rep["status"] == "skipped":
        return f"GPU check skipped: {rep['reason']}"
    lines = [
        f"GPU check on {d.get('name', '?')} (capability {d.get('capability', '?')}, "
        f"{d.get('memory_gib', '?')} GiB): torch {v['torch']}, CUDA {v['cuda']}, "
        f"driver {v['driver']}; {rep['wall_s']:.0f} s of a {rep['budget_s']:.0f} s budget",
        f"{'part':<12} {'status':<10} {'time':>7} {'limit':>6}  result",
    ]
    for p in rep["parts"]:
        lines.append(
            f"{p['name']:<12} {p['status']:<10} {p['seconds']:>6.0f}s {p['limit_s']:>5.0f}s  "
            f"{p['summary'] or p['error']}"
        )
        if p["summary"] and p["error"]:
            lines.append(f"{'':<39}{p['error']}")
    lines.append("goals (set for an H200):")
    for g in rep["goals"]:
        lines.append(
            f"  {g['result']:<13} {g['goal']} {g['target']}: {g['measured']}"
            + (f" ({g['note']})" if g["note"] else "")
        )
    return "\n".join(lines)
