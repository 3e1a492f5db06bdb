"""`workbench quant`: int8 quantization of Linear layers (and Hugging Face Conv1D) with measured
latency, size, accuracy and output error against the float model, its coverage (which layers were
converted, which stayed float and why, the share of the weights that became int8), and a verdict
from the paired speedup's interval.

    workbench quant --json --width 1024 --train-epochs 5
    workbench quant --method weight_only_int8 --backend torchao --run-dir runs/..._mlp-fp32
    workbench quant --model examples/gpt2.py:build --data text --method dynamic_int8
"""

from __future__ import annotations

import json
import sys

from ..config import ConfigError
from ._interrupt import Interrupt
from .prune import add_subject_args, parse_list, subject_from_args, timing_header

CHOICES = ("all", "dynamic_int8", "weight_only_int8", "semi_structured_2_4")


def add_parser(sub):
    p = sub.add_parser(
        "quant",
        help="int8 quantization: latency, size, accuracy, verdict",
        description="Quantize a model's Linear layers; each method is timed side "
        "by side with the float model. Converting nothing is an error.",
    )
    add_subject_args(p)
    p.add_argument("--method", default="all", help=" | ".join(CHOICES))
    p.add_argument("--backend", default="auto", help="auto | torchao | torch.ao")
    p.add_argument("--device", default="cpu", help="cpu | cuda")
    return p


def quantize_report(
    subject, methods, backend: str, device: str, batch_sizes, rounds: int, stop=None, heard=None
) -> dict:
    """Each method's row against the float model. `stop()` True (Ctrl-C) ends the timing after its
    round under way: every row keeps what was measured, a batch size not reached reads 'not
    measured', and a method not yet quantized is not in the report. `heard(line)` is told when the
    timing begins."""
    from ..compress.quantize import quantize, unsupported_reason
    from ..compress.reasons import judge
    from ..compress.coverage import columns
    from ..compress.stats import latencies, output_error, state_size_bytes

    dense = subject.model.to(device)
    models, rows, skipped = {"float": dense}, {}, []
    for method in methods:
        if stop is not None and stop():
            break
        reason = unsupported_reason(method, device, backend)
        if reason and len(methods) > 1:
            skipped.append({"method": method, "verdict": "skipped", "why": reason})
            continue
        q, info = quantize(dense, method, backend=backend, device=device)  # refuses with a reason
        models[method], rows[method] = q, info
    if heard is not None:
        heard(
            f"timing {', '.join(models)} side by side: {rounds} rounds at each batch size "
            f"({', '.join(map(str, batch_sizes))}); Ctrl-C keeps the rounds so far"
        )
    times = latencies(models, subject, batch_sizes, rounds, stop=stop)
    x = subject.example(max(batch_sizes), seed=1).to(device)
    float_size = state_size_bytes(dense)
    out = {
        "float": {"accuracy": subject.evaluate(dense), "size_bytes": float_size, **times["float"]},
        "results": [],
        "skipped": skipped,
    }
    for method, info in rows.items():
        size = state_size_bytes(models[method])
        cov = info["coverage"]
        fields = {k: v for k, v in info.items() if k != "coverage"}
        accuracy = subject.evaluate(models[method])
        out["results"].append(
            {
                **fields,
                **columns(cov),
                "details": cov,
                "accuracy": accuracy,
                "output_error": output_error(dense, models[method], x),
                "size_bytes": size,
                "size_ratio": round(size / float_size, 3),  # of the float model's size
                **times[method],
                **judge(method, times[method], coverage=cov, accuracy=(out["float"]["accuracy"], accuracy)),
            }
        )
    return out


def main(args) -> int:
    import torch

    if args.method not in CHOICES:
        raise ConfigError(f"--method must be one of {', '.join(CHOICES)}, got {args.method!r}")
    if args.device not in ("cpu", "cuda"):
        raise ConfigError(f"--device must be cpu or cuda, got {args.device!r}")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "--device must be cpu on this machine, got 'cuda': torch sees no CUDA GPU "
            "(torch.cuda.is_available() is False)"
        )
    methods = list(CHOICES[1:]) if args.method == "all" else [args.method]
    batch_sizes = parse_list(args.batch_sizes, int, "--batch-sizes")
    if not batch_sizes or min(batch_sizes) < 1:
        raise ConfigError(f"--batch-sizes must be integers >= 1, got {args.batch_sizes!r}")
    subject = subject_from_args(args)
    note = subject.accuracy_note()
    if note and not args.json:  # before the minutes of timing, not after
        print(f"workbench quant: note: {note}", file=sys.stderr, flush=True)
    with Interrupt("quant", quiet=args.json) as interrupted:  # Ctrl-C: the rows measured so far
        report = quantize_report(
            subject,
            methods,
            args.backend,
            args.device,
            batch_sizes,
            args.rounds,
            stop=interrupted,
            heard=None if args.json else lambda line: print(f"  {line}", file=sys.stderr, flush=True),
        )
    report.update(
        model=subject.name,
        torch=torch.__version__,
        timing_threads=report["float"]["timing_threads"],
        trained=subject.trained,
        accuracy_note=note or None,
        **({"interrupted": interrupted.asked} if interrupted() else {}),
    )
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return interrupted.exit_code(0)
    from ..compress.stats import speedup_label

    f = report["float"]
    print(f"float: accuracy {f['accuracy']}, {f['size_bytes'] / 1e6:.2f} MB")
    print(timing_header(report["results"]))
    for r in report["results"]:
        speed = "; ".join(f"b{b} {speedup_label(r, b, conditions=False)}" for b in batch_sizes)
        print(
            f"{r['method']} ({r['backend']}): accuracy {r['accuracy']}, {r['size_ratio']:.2f} of the "
            f"float size; {speed}\n  {r['verdict']}: {r['why']}"
        )
        for n in r["notes"]:
            print(f"  note: {n}")
    for s in report["skipped"]:
        print(f"{s['method']}: skipped: {s['why']}")
    if note:
        print(note)
    if interrupted():
        print(interrupted.said(), file=sys.stderr)
    return interrupted.exit_code(0)
