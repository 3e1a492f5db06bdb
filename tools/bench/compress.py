"""Does compression speed up inference? Speedups against the dense model, measured side by side
(interleaved rounds, 1 thread, batch 1 and 64): each the median of the per-round ratios with its
95 % interval and the verdict, and the share of the model's weights each variant touched.

    python -m tools.bench compress          # or: make bench
    python -m tools.bench.compress --rounds 30 --only gpt2,resnet

- the 3x1024 MLP: structured 50 % (neurons removed) and dynamic int8 (torch.ao), goal >= 2x at
  batch 64 each; masked 50 % (zeros in dense weights; the mask hooks still on) about 1x
- the small CNN with 50 % of its channels removed
- your own models, from examples/ (a source checkout): a GPT-style model with a tied head, Hugging
  Face's GPT-2 from a small config, a residual CNN, and the residual CNN on a Dataset of your own:
  structured pruning (torch-pruning's dependency graph) and dynamic int8, side by side
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from workbench.compress.coverage import columns
from workbench.compress.unstructured import copy_model, magnitude_prune, make_real, pruning_coverage
from workbench.compress.quantize import quantize, torchao_available
from workbench.compress.stats import latencies, speedup_label, state_size_bytes
from workbench.compress.structured import structured_coverage, structured_prune
from workbench.compress.subject import Subject
from workbench.config import RunConfig
from workbench.machine.contention import busy_sentence
from workbench.train.models import MLP, SmallCNN
from .results import recorded

GOALS = {"structured 50%": 2.0, "dynamic int8": 2.0}
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
OWN_MODELS = {  # name -> (factory, config changes): the models of the README's "Your own model"
    "gpt": ("gpt.py:build", {"data.name": "text"}),
    "gpt2": ("gpt2.py:build", {"data.name": "text"}),
    "resnet": ("resnet.py:build", {"data.name": "synthetic_images"}),
    "dataset": ("resnet.py:build", {"data.name": "dataset", "data.factory": "strokes.py:build"}),
}


def mlp_variants() -> tuple[Subject, dict, dict]:
    torch.manual_seed(0)
    dense = MLP(1024, 10, width=1024, depth=3).eval()
    masked = magnitude_prune(copy_model(dense), 0.5, scope="global")
    small = structured_prune(dense, 0.5)
    q, info = quantize(dense, "dynamic_int8", backend="torch.ao")
    variants = {
        "dense": dense,
        "structured 50%": small,
        "dynamic int8": q,
        "masked 50% (made real)": make_real(copy_model(masked)),
        "masked 50% (hooks on)": masked,
    }
    cov = {
        "structured 50%": structured_coverage(dense, small),
        "dynamic int8": info["coverage"],
        "masked 50% (made real)": pruning_coverage(dense),
    }
    cov["masked 50% (hooks on)"] = cov["masked 50% (made real)"]
    if torchao_available():
        q2, info2 = quantize(dense, "dynamic_int8", backend="torchao")
        variants["dynamic int8 (torchao, eager)"], cov["dynamic int8 (torchao, eager)"] = (
            q2,
            info2["coverage"],
        )
    return Subject(dense, (1024,)), variants, cov


def cnn_variants() -> tuple[Subject, dict, dict]:
    torch.manual_seed(0)
    dense = SmallCNN(3, 10, width=64, depth=3, image_size=32).eval()
    small = structured_prune(dense, 0.5)
    return (
        Subject(dense, (3, 32, 32)),
        {"dense": dense, "structured 50%": small},
        {"structured 50%": structured_coverage(dense, small)},
    )


def own_variants(name: str) -> tuple[Subject, dict, dict]:
    """Structured 50 % and dynamic int8 of one of the example models (fresh weights: latency
    does not depend on training)."""
    factory, changes = OWN_MODELS[name]
    changes = {k: str(EXAMPLES / v) if k == "data.factory" else v for k, v in changes.items()}
    cfg = RunConfig.smoke().replace(**{"model.name": str(EXAMPLES / factory), **changes})
    torch.manual_seed(0)
    subject = Subject.from_config(cfg)
    dense = subject.model
    small = structured_prune(dense, 0.5, example=subject.example(2))
    q, info = quantize(dense, "dynamic_int8")
    return (
        subject,
        {"dense": dense, "structured 50%": small, "dynamic int8": q},
        {"structured 50%": structured_coverage(dense, small), "dynamic int8": info["coverage"]},
    )


def report(title: str, subject: Subject, variants: dict, cov: dict, batches, rounds: int) -> list[str]:
    times = latencies(variants, subject, batches, rounds)
    big = max(batches)
    print(
        f"\n{title}: speedup vs dense, median of {rounds} interleaved rounds with its 95 % "
        f"interval, {times['dense']['timing_threads']} thread(s)"
    )
    busy = busy_sentence(times["dense"]["contention"])
    if busy:
        print(f"  {busy}")
    print(
        f"{'variant':30s} {'size MB':>8s} {'coverage':>8s}  "
        + "  ".join(f"{'batch ' + str(b):44s}" for b in batches)
    )
    failures = []
    for name, model in variants.items():
        t = times[name]
        frac = columns(cov[name])["coverage"] if name in cov else None
        share = "" if frac is None else f"{frac:.1%}" if frac < 0.1 else f"{frac:.0%}"
        cells = "  ".join(f"{speedup_label(t, b):44s}" for b in batches)
        print(f"{name:30s} {state_size_bytes(model) / 1e6:8.2f} {share:>8s}  {cells}")
        goal = GOALS.get(name) if title.startswith("MLP") else None
        if goal and t[f"speedup_b{big}"] < goal:
            failures.append(f"{title} {name}: {speedup_label(t, big)}, goal {goal}x at batch {big}")
    return failures


@recorded("compress", "Does compression speed up inference?")
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench compress")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument(
        "--only", default="", help="comma-separated: mlp, cnn, " + ", ".join(OWN_MODELS) + " (default: all)"
    )
    args = parser.parse_args(argv)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    batches = (1, 64)
    failures = []
    if not only or "mlp" in only:
        failures += report("MLP 3x1024 (input 1024)", *mlp_variants(), batches, args.rounds)
    if not only or "cnn" in only:
        failures += report("SmallCNN width 64, 3x32x32", *cnn_variants(), batches, args.rounds)
    titles = {
        "gpt": "GPT-style (tied head, (logits, loss)), text",
        "gpt2": "Hugging Face GPT-2 (small config), text",
        "resnet": "residual CNN, 3x32x32",
        "dataset": "residual CNN on your Dataset (examples/strokes.py), 1x8x8",
    }
    for name in OWN_MODELS:
        if only and name not in only:
            continue
        if not EXAMPLES.is_dir():
            print(f"\n{titles[name]}: skipped: {EXAMPLES} is not here (a source checkout has it)")
            continue
        failures += report(titles[name], *own_variants(name), batches, args.rounds)
    print(
        "\nExpected: masked ~1.0x (dense kernels multiply the zeros; hooks add work), structured "
        "and int8 faster where the converted layers hold the time. torch.ao.quantization warns "
        "that it is deprecated; it is used because its CPU int8 kernels are the fast ones here."
    )
    for f in failures:
        print(f"MISSED GOAL: {f} (a busy machine can cause this; rerun before concluding)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
