"""Where the small transformer's step time and memory go on this machine, and what checkpointing and
the optimizer implementations trade, measured side by side:

    python -m tools.bench profile              # or: make bench
    python -m tools.bench.profile --rounds 8 --steps 30 --threads 1

1. the profiled breakdown of the default transformer (d256, 2 layers, sequence 64, batch 64):
   phases, verdict, memory beside the chooser's estimate;
2. checkpointing its layers: activations measured with and without, and the speed ratio of the two
   configs from an A/B test (alternating real runs, the interval, the verdict);
3. the AdamW step as for-loop, foreach and fused, interleaved, each against the for-loop with its
   interval.
"""

from __future__ import annotations

import argparse

from workbench.measure.ratios import min_rounds
from workbench.profile.checkpoint import checkpoint_trade
from workbench.profile.optimizers import compare_optimizers
from workbench.profile.profiled_run import default_transformer, profile
from .results import recorded


@recorded("profile", "Where the small transformer's step time and memory go")
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench profile")
    parser.add_argument(
        "--rounds",
        type=int,
        default=min_rounds(),
        help="A/B rounds (default: the fewest that carry a 95%% interval)",
    )
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    args = parser.parse_args(argv)
    cfg = default_transformer().replace(**{"run.threads": args.threads})

    print("1. breakdown of the default transformer")
    breakdown = profile(cfg).text().splitlines()
    # the trace stays in the run's folder, which the repository does not hold: not named here
    print("\n".join(line for line in breakdown if not line.startswith("trace: ")))
    print("\n2. activation checkpointing of its layers")
    trade = checkpoint_trade(cfg, ["blocks.layers.*"], rounds=args.rounds)
    print(trade.text())
    print("\n3. optimizer implementations")
    print(compare_optimizers(cfg, rounds=max(10, args.rounds)).text())
    print(
        "\nRatios above 1: faster than the reference. Read a ratio only with its interval; on a "
        "busy machine (said above when it was) rerun before concluding."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
