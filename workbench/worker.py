"""The training worker: one process per rank, the same on a laptop and on a cluster.

    python -m workbench.worker --config RUN_DIR/config.json
    torchrun --nproc-per-node 2 -m workbench.worker --config RUN_DIR/config.json

It reads the torchrun environment (RANK, LOCAL_RANK, WORLD_SIZE, TORCHELASTIC_RESTART_COUNT),
appends events to RUN_DIR/rank{R}.jsonl and always ends them with a `done` or `error` record.
SIGTERM or Ctrl-C stops it cleanly: an `error` record with status "stopped", exit code 143.
"""
from __future__ import annotations

import argparse
import signal
import sys
import time
import traceback
from pathlib import Path

from .events import EventWriter

EXIT_STOPPED = 143


class RunStopped(Exception):
    """Raised in the main thread by SIGTERM/SIGINT so the loop unwinds and records why."""


def _stop(signum, frame):
    raise RunStopped(f"stopped by signal {signal.Signals(signum).name}")


def _record(run_dir: Path, env, status: str, summary: dict) -> None:
    if env.rank == 0:
        from .runstore import write_json_atomic

        write_json_atomic(run_dir / "summary.json", {"status": status, **summary})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workbench.worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="RUN_DIR/config.json")
    args = parser.parse_args(argv)
    config_path = Path(args.config)
    run_dir = config_path.parent
    if not config_path.is_file():
        print(f"workbench.worker: --config {args.config!r} does not exist", file=sys.stderr)
        return 2

    from .trainer import RankEnv  # imports torch: after the cheap checks

    env = RankEnv.from_environ()
    events = EventWriter(run_dir, env.rank, env.attempt)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    t0 = time.time()
    cfg = None
    try:
        from .config import RunConfig
        from .trainer import train

        cfg = RunConfig.load(config_path)
        summary = train(cfg, events, env, run_dir)
        events.write("done", **summary)
        _record(run_dir, env, "completed", summary)
        return 0
    except (RunStopped, KeyboardInterrupt) as e:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not cut the record
        events.write("error", status="stopped", error_type="RunStopped", message=str(e) or "stopped",
                     wall_s=round(time.time() - t0, 3))
        _record(run_dir, env, "stopped", {"message": str(e)})
        return EXIT_STOPPED
    except BaseException as e:
        tb = traceback.format_exc()
        (run_dir / f"rank{env.rank}.traceback.txt").write_text(tb)
        events.write("error", status="failed", error_type=type(e).__name__, message=str(e),
                     traceback=tb, wall_s=round(time.time() - t0, 3))
        _record(run_dir, env, "failed",
                {"error_type": type(e).__name__, "message": str(e), "rank": env.rank})
        raise
    finally:
        events.close()


if __name__ == "__main__":
    sys.exit(main())
