"""The training worker: one process per rank, the same on a laptop and on a cluster.

    python -m workbench.worker --config RUN_DIR/config.json
    torchrun --nproc-per-node 2 -m workbench.worker --config RUN_DIR/config.json
    python -m workbench.worker --warm SPARE_DIR     # a spare: warms up, then waits for its run


It reads the torchrun environment (RANK, LOCAL_RANK, WORLD_SIZE, TORCHELASTIC_RESTART_COUNT),
appends events to its file in RUN_DIR (workbench.runfolder) and always ends them with a `done` or
`error` record.
SIGTERM or Ctrl-C stops it cleanly: an `error` record with status "stopped", exit code 143.
A rank dies with its parent (PR_SET_PDEATHSIG), writes a heartbeat every second, and an exception is
also recorded in torchrun's error file, so torchrun reports the failing rank's own traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

from ..config import ConfigError, RunConfig
from ..machine.contention import ContentionMeter, run_tree_pid
from ..disk import disk_message, is_disk_full, keep_writes_to_owner, write_atomic
from ..events import ATTEMPT, DONE, ERROR, EVENT, NODE, RANK, START, FileTail
from ..procs import leave, set_pdeathsig
from ..runfolder import RunFolder, Summary
from .heartbeat import Heartbeat, LockedWriter

EXIT_STOPPED = 143
EXIT_DISK_FULL = 75  # the run folder's disk is full (EX_TEMPFAIL: free space, then run again)
EXIT_REFUSED = 2  # a ConfigError inside the rank: one line; its traceback stays in the run folder
T_MAIN = time.time()  # the interpreter is up and this module imported, before torch is


class RunStopped(Exception):
    """Raised in the main thread by SIGTERM/SIGINT so the loop unwinds and records why."""


def _stop(signum, frame):
    raise RunStopped(f"stopped by signal {signal.Signals(signum).name}")


def _hold_stop_signals() -> None:
    """While a rank records how it ended, a stop signal (torchrun stopping the others after one
    failed) must not cut the record short: seen under load as a rank with no end record at all."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def _record(run_dir: Path, env, status: str, summary: Summary) -> None:
    if env.rank == 0:
        RunFolder(run_dir).write_summary({"status": status, **summary})


def attempt_of(run_dir: Path, env) -> int:
    """This rank's attempt: torchrun's count (after earlier SLURM requeues), or one past the last
    attempt this rank began in the run folder if that is later. Each node's torchrun agent counts
    only its own failures: when a rank on another node fails, the agents here restart their ranks
    with the count unchanged, and only the run folder, which the nodes share, knows it is a new
    attempt."""
    records = FileTail(RunFolder(run_dir).events_file(env.rank)).poll()
    begun = [int(r.get(ATTEMPT, 0)) for r in records if r.get(EVENT) == START]
    return max([env.attempt, *(a + 1 for a in begun)])


def _try(write, *args, **kwargs) -> None:
    """Write what can still be written after a failure; a full disk must not hide the first error."""
    try:
        write(*args, **kwargs)
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workbench.worker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--config", help="RUN_DIR/config.json")
    which.add_argument(
        "--warm",
        metavar="SPARE_DIR",
        help="warm up, then take the run named in SPARE_DIR/job.json (workbench.train.spare_rank)",
    )
    args = parser.parse_args(argv)
    set_pdeathsig()  # torchrun (or the supervisor) killed: this rank dies too, never an orphan
    keep_writes_to_owner()  # a rank started by hand or by SLURM, not under the supervisor, too
    main_t, warm = T_MAIN, {}
    if args.warm:
        from .spare_rank import take_job

        config_path, warm = take_job(Path(args.warm), int(os.environ.get("RANK", 0)))
        main_t = warm["job_t"]  # where a cold rank would be now: its run known, nothing loaded
    else:
        config_path = Path(args.config)
    run_dir = config_path.parent
    if not config_path.is_file():
        print(f"workbench.worker: --config {str(config_path)!r} does not exist", file=sys.stderr)
        return 2

    from .rank import RankEnv  # imports torch: after the cheap checks
    from .trainer import Phase, outcome, train

    env = RankEnv.from_environ()
    try:
        env.attempt = attempt_of(run_dir, env)
        events = LockedWriter(run_dir, env.rank, env.attempt)
        events.write(
            START,
            pid=os.getpid(),
            created_t=_created_t(),
            main_t=round(main_t, 4),
            host=socket.gethostname(),
            world_size=env.world_size,
            local_rank=env.local_rank,
            **(
                {NODE: os.environ["SLURMD_NODENAME"]}  # a SLURM job's node
                if "SLURMD_NODENAME" in os.environ
                else {}
            ),
            **({"master_addr": os.environ["MASTER_ADDR"]} if "MASTER_ADDR" in os.environ else {}),
            **({"warm": warm} if warm else {}),
        )
    except OSError as e:
        _try(
            print,
            f"workbench.worker rank {env.rank}: {disk_message(run_dir, e, 'writing the run folder')}",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_DISK_FULL
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGHUP, _stop)  # a closed terminal, or another program: named, not silent
    t0 = time.time()
    cfg = None
    from .step import StepPart

    heartbeat = Heartbeat(
        events,
        contention=ContentionMeter(run_tree_pid()) if env.rank == 0 else None,
        part=lambda: StepPart.now,
    )
    heartbeat.start()
    phase = Phase("reading the config")
    try:
        cfg = RunConfig.load(config_path)
        summary = train(cfg, events, env, run_dir, phase)
        ended = outcome(summary)  # completed, or diverged: the loss went NaN
        events.write(DONE, **ended, **summary)
        _record(run_dir, env, ended["status"], {**summary, **ended})
        return 0
    except (RunStopped, KeyboardInterrupt) as e:
        _hold_stop_signals()
        _try(
            events.write,
            ERROR,
            status="stopped",
            error_type="RunStopped",
            message=str(e) or "stopped",
            wall_s=round(time.time() - t0, 3),
        )
        _try(_record, run_dir, env, "stopped", {"message": str(e)})
        return EXIT_STOPPED
    except BaseException as e:
        _hold_stop_signals()
        tb = traceback.format_exc()
        if is_disk_full(e):  # nothing more fits: one line, no half-written files, no traceback
            message = disk_message(run_dir, e, "writing the run folder")
            _try(
                events.write, ERROR, status="failed", error_type="DiskFull", message=message, phase=phase.name
            )
            _try(print, f"workbench.worker rank {env.rank}: {message}", file=sys.stderr, flush=True)
            return EXIT_DISK_FULL
        _try(write_atomic, RunFolder(run_dir).traceback_file(env.rank), tb)
        _try(
            events.write,
            ERROR,
            status="failed",
            error_type=type(e).__name__,
            message=str(e),
            phase=phase.name,
            traceback=tb,
            wall_s=round(time.time() - t0, 3),
        )
        _try(
            _record,
            run_dir,
            env,
            "failed",
            {"error_type": type(e).__name__, "message": str(e), RANK: env.rank, "phase": phase.name},
        )
        if isinstance(e, ConfigError):  # a refusal, not a crash: its line, not a traceback
            _try(
                print,
                f"workbench.worker rank {env.rank}: {e} (traceback: "
                f"{RunFolder(run_dir).traceback_file(env.rank)})",
                file=sys.stderr,
                flush=True,
            )
            return EXIT_REFUSED
        raise
    finally:
        heartbeat.stop()
        events.close()


def _created_t() -> float | None:
    """When this process was created (wall clock): interpreter start-up is main_t minus this."""
    try:
        import psutil

        return round(psutil.Process().create_time(), 4)
    except Exception:  # noqa: BLE001 - timing detail only
        return None


def _main_recorded() -> int:
    """main() wrapped by torchrun's error recorder: an exception lands in the rank's error file,
    which torchrun shows as the root cause instead of the other ranks' knock-on errors."""
    if "TORCHELASTIC_ERROR_FILE" not in os.environ:
        return main()
    from torch.distributed.elastic.multiprocessing.errors import record

    return record(main)()


if __name__ == "__main__":
    leave(_main_recorded())
