"""`workbench export`: a run or a config as a standalone torch script, torchrun commands and a SLURM job.

workbench export --run runs/20260101-120000_mlp-bf16 --to exported/
workbench export --config my_config.json --to exported/ --nodes 4
"""

from __future__ import annotations


def add_parser(sub):
    p = sub.add_parser(
        "export",
        help="write train.py, config.json, torchrun commands and job.slurm",
        description=__doc__.split("\n\n")[0],
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="a run folder (from `workbench runs`)")
    source.add_argument("--config", help="a RunConfig JSON file")
    p.add_argument("--to", required=True, help="folder to write the export into")
    p.add_argument(
        "--nodes",
        type=int,
        help="nodes in the multi-node command and job.slurm "
        "(default: the config's distributed.nnodes, at least 2)",
    )
    p.add_argument("--port", type=int, default=29500, help="rendezvous port (default 29500)")
    p.add_argument("--force", action="store_true", help="overwrite an earlier export in --to")
    return p


def main(args) -> int:
    from ..export import export

    result = export(args.run or args.config, args.to, nodes=args.nodes, port=args.port, overwrite=args.force)
    print(result)
    return 0
