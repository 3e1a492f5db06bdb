"""The second process of the monitor part: it allocates a known amount on the GPU, says so on one
JSON line, and holds it until its stdin closes (or its parent dies). Started by the check:

    python -m tools.gpucheck.holder --mib 2048 --device 0
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from workbench.procs import set_pdeathsig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpucheck.holder")
    parser.add_argument("--mib", type=int, required=True)
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args(argv)
    set_pdeathsig()  # the check died: so does this, and its memory goes back
    import torch

    device = torch.device("cuda", args.device)
    block = torch.empty(args.mib * 2**20, dtype=torch.uint8, device=device)
    block.fill_(1)  # touched, not only reserved
    torch.cuda.synchronize(device)
    print(
        json.dumps(
            {
                "ready": True,
                "pid": os.getpid(),
                "mib": args.mib,
                "allocated_mib": torch.cuda.memory_allocated(device) / 2**20,
                "reserved_mib": torch.cuda.memory_reserved(device) / 2**20,
            }
        ),
        flush=True,
    )
    sys.stdin.read()  # until the check closes our stdin
    del block
    return 0


if __name__ == "__main__":
    sys.exit(main())
