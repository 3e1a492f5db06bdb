"""`workbench submit`: run a config on a SLURM cluster and follow the job.

    workbench submit --config config.json --wait        # submit, follow to the end, exit with it
    workbench submit --preset smoke --nodes 1 --time 00:10:00
    workbench submit RUN_DIR --wait                     # follow (or cancel) a job submitted before

The run folder (default: a new one under runs/, on a file system the nodes share) holds the
config, the batch file (job.slurm, from the one SLURM template) and the job id; its events are a
local run's, so `workbench runs`, `compare` and the notebook's dashboard read it as one. sbatch,
scontrol and scancel are the ones on PATH, with SLURM_CONF as set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..config import ConfigError
from .run import FLAGS, add_data_args, build_config, format_summary

EXIT_FAILED = 1


def add_parser(sub):
    p = sub.add_parser(
        "submit", help="run a config as a SLURM job and follow it", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("run_dir", nargs="?", help="a run folder submitted before: follow its job")
    p.add_argument("--config", help="a RunConfig JSON file (default: the default preset)")
    p.add_argument("--preset", choices=["default", "smoke"], default="default")
    p.add_argument("--model")
    add_data_args(p)
    for flag in ("steps", "batch_size", "nproc"):
        p.add_argument(f"--{flag.replace('_', '-')}", type=int, dest=flag)
    p.add_argument(
        "--set", action="append", default=[], metavar="FIELD=JSON", help="any config field (repeatable)"
    )
    p.add_argument(
        "--nodes",
        type=int,
        help="nodes to ask SLURM for (default: the config's distributed.nnodes, 1 unless set)",
    )
    p.add_argument("--time", default="00:30:00", help="the job's time limit (SLURM --time)")
    p.add_argument(
        "--cpus-per-task", type=int, help="CPUs per node (default: ranks per node x threads per rank)"
    )
    p.add_argument("--into", help="folder for this run (default: a new one under runs/)")
    p.add_argument("--wait", action="store_true", help="follow the job until it ends; exit with it")
    p.add_argument("--cancel", action="store_true", help="cancel the job of RUN_DIR (scancel)")
    p.add_argument("--json", action="store_true", help="print the final summary as JSON")
    # run by the job's own batch script as it ends (srun's exit code, or TERM): not for people
    p.add_argument("--job-ended", metavar="HOW", help=argparse.SUPPRESS)
    return p


def _fill(args) -> None:
    """The flags `workbench run` reads that submit does not take, as unset."""
    for flag in FLAGS:
        if not hasattr(args, flag):
            setattr(args, flag, None)


def main(args) -> int:
    from ..distributed.jobs import Job, submit

    if args.run_dir is not None:
        if args.config or args.into:
            raise ConfigError("give RUN_DIR (a submitted run) or --config/--into, not both")
        job = Job(args.run_dir, prefix=[], env=dict(os.environ)) if args.job_ended else Job(args.run_dir)
        if args.job_ended:  # inside the job: its own SLURM, as the batch script's environment has it
            job.record_end(args.job_ended)
            return 0
        if args.cancel:
            job.cancel()
            print(f"workbench submit: cancelled SLURM job {job.job_id}", file=sys.stderr)
            return 0
    else:
        if args.cancel:
            raise ConfigError("--cancel needs RUN_DIR, the folder of a submitted run")
        _fill(args)
        cfg = build_config(args)
        job = submit(cfg, args.into, nodes=args.nodes, time_limit=args.time, cpus_per_task=args.cpus_per_task)
        print(
            f"workbench submit: SLURM job {job.job_id}, run folder {job.run_dir}", file=sys.stderr, flush=True
        )
    if not args.wait:
        print(job.job_id)
        return 0
    try:
        result = job.wait(
            on_state=lambda s: print(f"workbench submit: job {job.job_id} {s}", file=sys.stderr, flush=True)
        )
    except KeyboardInterrupt:
        job.cancel("cancelled by Ctrl-C")
        print(f"workbench submit: cancelled SLURM job {job.job_id} (Ctrl-C); events kept", file=sys.stderr)
        return 130
    result = {"run_dir": str(job.run_dir), **result}
    print(json.dumps(result, indent=2, sort_keys=True) if args.json else format_summary(result))
    if result.get("status") != "completed":
        print(
            f"workbench submit: {result.get('status')}: {result.get('message')} (see {job.run_dir})",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return 0
