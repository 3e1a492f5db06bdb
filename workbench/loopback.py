"""The loopback-bound torchrun agent's command, as single-node run commands name it:

    python -m workbench.loopback --nnodes=1 --nproc-per-node=2 ... -m workbench.worker --config ...

Its code lives in workbench.distributed.agent; this entry point keeps the command stable."""

import sys

from .distributed.agent import main

if __name__ == "__main__":
    sys.exit(main())
