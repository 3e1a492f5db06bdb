"""What bf16 and fp16 buy over fp32 on this machine, for training, and why: each model's precision
lesson (workbench.hardware.lessons: its own steps in fp32, bf16 and fp16, interleaved in one warm
process until decided or out of budget), beside this machine's curve of 16-bit matmul speed by
matrix side (workbench.hardware.size_curve), on which each model's matmuls are placed.

    python -m tools.bench precision [--busy N]     # or: make bench
"""

from __future__ import annotations

import argparse
from contextlib import nullcontext

from workbench.config import RunConfig
from workbench.hardware.lessons import precision_lesson
from workbench.hardware.size_curve import size_curve
from workbench.procs import OtherWork
from .results import recorded

MODELS = {
    "default MLP (digits)": RunConfig.default(),
    "transformer d256 L2 seq64": RunConfig.default().replace(
        **{
            "model.name": "transformer",
            "model.width": 256,
            "model.depth": 2,
            "model.heads": 4,
            "data.name": "text",
            "data.seq_len": 64,
            "data.num_samples": 2048,
            "loader.batch_size": 64,
        }
    ),
}


@recorded("precision", "What bf16 and fp16 buy over fp32, for training, and why")
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench precision", description=__doc__)
    p.add_argument("--busy", type=int, default=0, help="busy processes held beside the measurement")
    args = p.parse_args(argv)
    with OtherWork(args.busy) if args.busy else nullcontext():
        curve = size_curve("cpu", refresh=True)
        print(f"This machine's curve ({curve.source}):\n")
        print("| side | " + " | ".join(f"{d} over fp32" for d in curve.points) + " |")
        print("|---|" + "---|" * len(curve.points))
        for side in sorted({s for d in curve.points for s in curve.sides(d)}):
            cells = [(r.label() if (r := curve.ratio(d, side)) else "not measured") for d in curve.points]
            print(f"| {side} | " + " | ".join(cells) + " |")
        for name, base in MODELS.items():
            lesson = precision_lesson(base.replace(**{"run.device": "cpu"}), refresh=True)
            print(f"\n{name}: {lesson.text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
