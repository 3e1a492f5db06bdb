"""`workbench hw`: what this machine is, and with --bench what it can do (measured ceilings).

workbench hw                  # the report: CPU, instruction sets, memory, torch build, GPUs
workbench hw --bench          # + matmul per dtype, memory and host<->device copies, cached
workbench hw --bench --quick --json
workbench hw --gpus           # the spec table of common GPUs the chooser uses
"""

from __future__ import annotations

import json
import math
import sys

from ..config import ConfigError


def add_parser(sub):
    p = sub.add_parser(
        "hw",
        help="hardware report and micro-benchmarks (measured ceilings)",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--json", action="store_true", help="print everything as JSON")
    p.add_argument(
        "--bench",
        action="store_true",
        help="measure the ceilings (matmul per dtype, copy bandwidth; seconds each)",
    )
    p.add_argument("--quick", action="store_true", help="smaller, shorter benchmarks")
    p.add_argument("--gpus", action="store_true", help="also print the spec table of common GPUs")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument(
        "--allreduce-ranks",
        type=int,
        default=0,
        metavar="N",
        help="also time all-reduce across N ranks (default: every GPU when >1)",
    )
    p.add_argument(
        "--no-save",
        action="store_true",
        help="do not cache the ceilings for MFU (~/.cache/workbench/ceilings/)",
    )
    return p


def _device(requested: str):
    import torch

    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"--device must be auto or cpu on this machine, got {requested!r}: "
            "torch sees no CUDA GPU (torch.cuda.is_available() is False)"
        )
    if requested.startswith("cuda:"):
        index = requested.split(":", 1)[1]
        if not index.isdigit() or int(index) >= torch.cuda.device_count():
            raise ConfigError(
                f"--device must name a GPU index below {torch.cuda.device_count()}, got {requested!r}"
            )
        return torch.device(requested)
    if requested not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"--device must be auto, cpu, cuda or cuda:N, got {requested!r}")
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def _save_elsewhere(ceilings, device, save) -> str:
    """The current folder, else the temporary folder: somewhere the minute of measuring survives."""
    import tempfile
    import time
    from pathlib import Path

    name = f"workbench-ceilings-{time.strftime('%Y%m%d-%H%M%S')}.json"
    for folder in (Path.cwd(), Path(tempfile.gettempdir())):
        try:
            return save(ceilings, device, folder / name)
        except ConfigError:
            continue
    return "nowhere (no writable folder): the figures are printed above"


def format_ceilings(ceilings, peaks: dict) -> str:
    """A table: measured value, spread, torch.utils.benchmark's figure, and the spec/estimate."""
    rows = [
        f"{'benchmark':<18}{'measured':>12}  {'unit':<8}{'spread':>7}{'size':>18}"
        f"{'torch.utils.benchmark':>23}{'peak':>10}  basis"
    ]
    for c in ceilings:
        if math.isnan(c.value):
            rows.append(f"{c.name:<18}{'-':>12}  {c.note}")
            continue
        check = f"{c.check:.4g} ({c.check_ratio:.2f}x)" if c.check else ""
        p = peaks.get(c.dtype or "", {})
        spec = p.get("spec_tflops")
        peak = f"{spec * 1e3:.4g}" if spec and c.kind == "compute" else ""
        rows.append(
            f"{c.name:<18}{c.value:>12.4g}  {c.unit:<8}{c.spread:>7.0%}{c.size:>18}"
            f"{check:>23}{peak:>10}  {p.get('spec_basis', '') if peak else ''}"
        )
    return "\n".join(rows)


def main(args) -> int:
    from ..hardware.machine_report import format_report, hardware_report

    if args.allreduce_ranks < 0:
        raise ConfigError(f"--allreduce-ranks must be >= 0, got {args.allreduce_ranks}")
    device = _device(args.device)
    rep = hardware_report()
    out = {"report": rep, "device": str(device)}
    from ..machine.peaks import load_ceilings, measured_when

    cached = load_ceilings(device)
    out["cached_ceilings"] = cached
    if not args.json:
        print(format_report(rep), flush=True)
        if cached and not args.bench:
            figures = ", ".join(
                f"{k} {v:.4g} {'GOP/s' if k == 'int8' else 'GFLOP/s'}"
                for k, v in cached["compute_gflops"].items()
            )
            print(
                f"Cached   ceilings {measured_when(cached)}: {figures} (MFU uses these; "
                "--bench measures again)"
            )
    if args.gpus:
        from ..machine.gpus import gpu_table

        table = gpu_table()
        out["gpu_table"] = table.to_dict(orient="records")
        if not args.json:
            print("\nCommon GPUs (dense peak TFLOP/s; sources in workbench/machine/gpus.py):")
            print(table.drop(columns=["source"]).to_string(index=False))
    if args.bench:
        from ..machine.peaks import save_ceilings, spec_peak
        from ..hardware.microbench import run_benchmarks

        def progress(i, n, label):
            print(f"\r[{'#' * i}{'.' * (n - i)}] {i}/{n} {label:<20}", end="", file=sys.stderr, flush=True)

        ceilings = run_benchmarks(
            device, quick=args.quick, allreduce_ranks=args.allreduce_ranks, progress=progress
        )
        print(file=sys.stderr)
        peaks = {}
        for c in ceilings:
            if c.dtype:
                spec, basis, source = spec_peak(device, c.dtype)
                peaks[c.dtype] = {"spec_tflops": spec, "spec_basis": basis, "spec_source": source}
        out.update(ceilings=[c.as_dict() for c in ceilings], peaks=peaks)
        if not args.no_save:
            try:
                out["cached_to"] = str(save_ceilings(ceilings, device))
            except ConfigError as e:  # the measurements are not lost: saved beside us instead
                out["cache_error"] = str(e)
                out["saved_to"] = str(_save_elsewhere(ceilings, device, save_ceilings))
                print(
                    f"workbench hw: {e}; the measured ceilings are saved to {out['saved_to']} "
                    "instead (MFU uses only the cache: set WORKBENCH_CACHE to a writable folder)",
                    file=sys.stderr,
                    flush=True,
                )
        if not args.json:
            print(f"\nCeilings on {device} (median of repeats; spread = p10-p90 / median):")
            print(format_ceilings(ceilings, peaks))
            if "cached_to" in out:
                print(
                    f"\nSaved to {out['cached_to']}: training runs on this device now report MFU "
                    "against these measured ceilings."
                )
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    return 0
