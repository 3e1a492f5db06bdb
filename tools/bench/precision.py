"""What bf16 and fp16 buy over fp32 on this machine, for training: each an A/B test in alternating
slices of one warm process (workbench.trials.config_ab), the median speed ratio with its interval and the
verdict, beside the matmul lesson of the same machine (workbench.hardware.lessons).

    python -m tools.bench precision [--rounds 8]     # or: make bench
"""

from __future__ import annotations

import argparse

from workbench.config import RunConfig
from workbench.hardware.lessons import precision_lesson
from workbench.quick import scaled
from workbench.trials.config_ab import ab_test
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


@recorded("precision", "What bf16 and fp16 buy over fp32, for training")
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench precision", description=__doc__)
    p.add_argument("--rounds", type=int, default=scaled(8, 6))
    args = p.parse_args(argv)
    print(precision_lesson("cpu", refresh=True).text)
    for name, base in MODELS.items():
        base = base.replace(**{"run.device": "cpu"})
        for dtype in ("bf16", "fp16"):
            result = ab_test(base, base.replace(**{"precision.dtype": dtype}), args.rounds, ("fp32", dtype))
            print(f"\n{name}: {result.text()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
