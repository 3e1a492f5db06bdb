"""How did a run end? Turn exit codes, rank events, tracebacks and torchrun's report into one
summary that names the rank at fault, so a crash on rank 1 is not shown as rank 0's knock-on
"Connection closed by peer". Called by the supervisor when a run ends; stdlib only.

    status: completed | diverged | failed | stopped
    cause:  raised | killed | stalled | start_timeout | rendezvous | exited | stopped
"""
from __future__ import annotations

import json
import re
import signal
from pathlib import Path

from ..config import RunConfig
from ..events import read_events
from ..runstore import read_summary, write_json_atomic

# Errors a rank raises because another rank died or hung, not because of its own code.
KNOCK_ON = ("connection closed", "connection reset", "broken pipe", "timed out", "timeout",
            "distbackenderror", "communicator was aborted", "socket", "recv", "peer")
_TORCHRUN_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


def is_knock_on(record: dict) -> bool:
    text = f"{record.get('error_type', '')} {record.get('message', '')}".lower()
    return any(k in text for k in KNOCK_ON)


def signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _latest(records: list[dict]) -> tuple[int, dict[int, list[dict]]]:
    attempt = max((int(r.get("attempt", 0)) for r in records), default=0)
    by_rank: dict[int, list[dict]] = {}
    for r in records:
        if int(r.get("attempt", 0)) == attempt:
            by_rank.setdefault(int(r.get("rank", 0)), []).append(r)
    return attempt, by_rank


def _last_step(recs: list[dict]) -> int:
    return max((r["step"] for r in recs if r.get("event") == "step"), default=0)


def _when(error: dict, recs: list[dict]) -> str:
    """'while building the model' for an error before the loop, 'at step N' inside it."""
    phase = error.get("phase")
    if phase and not phase.startswith("step "):
        return f"while {phase}"
    return f"at step {_last_step(recs) + 1}"


def torchrun_exit_codes(log_text: str) -> dict[int, int]:
    """Per-rank exit codes from torchrun's failure report in the launcher log."""
    return {int(rank): int(code) for rank, code in _TORCHRUN_FAILURE.findall(log_text)}


def traceback_of(run_dir: Path, rank: int, record: dict) -> str:
    path = run_dir / f"rank{rank}.traceback.txt"
    if path.is_file():
        return path.read_text(errors="replace")
    for err in sorted(run_dir.glob("torchrun_logs/**/error.json")):  # torchrun's error file
        try:
            info = json.loads(err.read_text())["message"]
        except (ValueError, KeyError, TypeError):
            continue
        if err.parent.name == str(rank) and isinstance(info, dict):
            return info.get("extraInfo", {}).get("py_callstack", "")
    return record.get("traceback", "")


def _multi_rank(run_dir: Path) -> bool:
    try:
        return RunConfig.load(run_dir / "config.json").distributed.world_size > 1
    except Exception:  # noqa: BLE001 - no readable config: assume torchrun
        return True


def diagnose(run_dir: Path, returncode: int | None, log_text: str = "") -> dict:
    """Name the rank at fault in a failed run and say what happened to it."""
    records = [r for r in read_events(run_dir) if r.get("event") != "heartbeat"]
    attempt, by_rank = _latest(records)
    ends = {rank: next((r for r in reversed(recs) if r.get("event") in ("done", "error")), None)
            for rank, recs in by_rank.items()}
    failed = sorted((r for r in ends.values() if r and r.get("status") == "failed"),
                    key=lambda r: r.get("t", 0))
    own = [r for r in failed if not is_knock_on(r)]
    if own:  # a rank raised by itself: its traceback, not the others' reactions
        r = own[0]
        rank = int(r["rank"])
        return {"cause": "raised", "failed_rank": rank, "error_type": r.get("error_type"),
                "message": f"rank {rank} raised {r.get('error_type')} "
                           f"{_when(r, by_rank[rank])}: {r.get('message')}",
                "traceback": traceback_of(run_dir, rank, r), "attempt": attempt}
    codes = torchrun_exit_codes(log_text)
    if returncode is not None and returncode < 0 and len(by_rank) <= 1:
        codes.setdefault(next(iter(by_rank), 0), returncode)  # one process: the supervisor's child
    silent = [rank for rank, end in ends.items() if end is None]  # no record: died by a signal
    killed = silent or [rank for rank, code in codes.items() if code == -signal.SIGKILL]
    if killed:
        rank = min(killed)
        code = codes.get(rank, -signal.SIGKILL)
        how = signal_name(code)
        oom = " - most likely out of memory (the kernel's OOM killer sends SIGKILL); lower the " \
              "batch size or the model size, or check `dmesg`" if code == -signal.SIGKILL else ""
        return {"cause": "killed", "failed_rank": rank, "error_type": "Killed", "signal": how,
                "message": f"rank {rank} was killed by {how} after step "
                           f"{_last_step(by_rank.get(rank, []))}{oom}", "attempt": attempt}
    stalled = [rank for rank, end in ends.items() if end and end.get("status") == "stopped"]
    if failed and stalled:  # others timed out waiting for a rank that never raised: it hung
        rank = stalled[0]
        beats = [r for r in read_events(run_dir) if r.get("event") == "heartbeat"
                 and r.get("rank") == rank and int(r.get("attempt", 0)) == attempt]
        where = f", last seen in {beats[-1].get('where')}" if beats else ""
        return {"cause": "stalled", "failed_rank": rank, "error_type": "Stalled",
                "message": f"rank {rank} stalled after step {_last_step(by_rank[rank])}{where}; "
                           f"the others timed out waiting for it: {failed[0].get('message')}",
                "attempt": attempt}
    if failed:
        r = failed[0]
        rank = int(r["rank"])
        return {"cause": "raised", "failed_rank": rank, "error_type": r.get("error_type"),
                "message": f"rank {rank}: {r.get('error_type')}: {r.get('message')}",
                "traceback": traceback_of(run_dir, rank, r), "attempt": attempt}
    if not by_rank and _multi_rank(run_dir):  # torchrun gave up before starting any rank
        errors = [ln.strip() for ln in log_text.splitlines() if "Error" in ln and ":" in ln]
        why = f": {errors[-1][-400:]}" if errors else ""
        return {"cause": "rendezvous", "error_type": "RendezvousError",
                "message": f"torchrun exited with code {returncode} before any rank started, so the "
                           f"rendezvous failed; check that the endpoint is reachable and every node "
                           f"uses the same one{why}", "attempt": attempt}
    return {"cause": "exited", "error_type": "ExitCode",
            "message": f"the launcher exited with code {returncode} before any rank reported an "
                       "error; see launcher.log", "attempt": attempt}


def finish_summary(run_dir: Path, cfg: RunConfig, returncode: int | None, stop_reason: str | None = None,
                   failure: dict | None = None) -> dict:
    """Write the final summary.json: rank 0's own summary when the run completed, otherwise what
    happened and which rank was at fault. Returns it."""
    summary = read_summary(run_dir)
    if returncode == 0 and summary.get("status") in ("completed", "diverged") and not failure:
        return summary
    log = run_dir / "launcher.log"
    log_text = log.read_text(errors="replace") if log.is_file() else ""
    if failure:
        info = {"status": "failed", "cause": failure["cause"], "failed_ranks": failure["ranks"],
                "error_type": {"stalled": "Stalled", "start_timeout": "StartTimeout"}[failure["cause"]],
                "message": failure["message"]}
        if failure["ranks"]:
            info["failed_rank"] = failure["ranks"][0]
    elif stop_reason:
        info = {"status": "stopped", "cause": "stopped", "error_type": "RunStopped",
                "message": stop_reason}
    else:
        info = {"status": "failed", **diagnose(run_dir, returncode, log_text)}
    summary = {k: v for k, v in summary.items() if k not in ("traceback", "rank")}
    summary.update(info, returncode=returncode, world_size=cfg.distributed.world_size)
    write_json_atomic(run_dir / "summary.json", summary)
    return summary
