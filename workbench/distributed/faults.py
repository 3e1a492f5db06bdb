"""How did a run end? Turn exit codes, rank events, tracebacks and torchrun's report into one
summary that names the rank at fault, so a crash on rank 1 is not shown as rank 0's knock-on
"Connection closed by peer". Called by the supervisor when a run ends; stdlib only.

    status: completed | diverged | failed | stopped
    cause:  raised | killed | exited (a rank, or the launcher, ended with a code and no record of why)
            | stalled | start_timeout | rendezvous | disk_full
            | agent_killed (the torchrun agent died by a signal; its ranks died with it)
            | node_lost (srun lost a SLURM job's task on one node: its agent and ranks died)
            | node_unreachable (across machines: a node stopped answering on the network; the
              watchdog probes it once this node's ranks have timed out waiting)
            | agent_signalled (the torchrun agent got a signal and stopped its ranks: status stopped)
            | rank_signalled (a rank got SIGTERM/SIGINT/SIGHUP from another program: status stopped)
            | supervisor_killed (written by the launching process when the supervisor was killed)
            | stopped (the Stop button, Ctrl-C) | supervisor_signalled (a signal from elsewhere)
            | launcher_exited (the kernel or CLI that started the run died)
A restart under distributed.max_restarts keeps each failed attempt's diagnosis in `restarts`.
A SLURM job adds SLURM's word (workbench.distributed.jobs): slurm_timeout, unschedulable,
slurm_cancelled. `diagnose` asks a table of rules (RULES) in order; the first that recognises the
evidence names the cause.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from ..config import ConfigError
from ..disk import DISK_FULL, Reserve, disk_message
from ..events import (
    ATTEMPT,
    CREATED_T,
    ENDS,
    ERROR,
    EVENT,
    HEARTBEAT,
    MESSAGE,
    is_knock_on,
    NODE,
    PID,
    RANK,
    START,
    STATUS,
    STEP,
    STEP_NUMBER,
    TIME,
    WORLD_SIZE,
    read_events,
)
from ..procs import same_process
from ..runfolder import FINAL_KEY, RunFolder, Summary, error_type_of
from ..runstore import processes_alive, read_summary

_AGENT_SIGNAL = re.compile(r"SignalException: Process (\d+) got signal: (\d+)")
# srun's word for a task (one node's torchrun agent) that died by a signal, not by exiting.
_SRUN_LOST = re.compile(
    r"^srun: error: (\S+): tasks? (\d+)[-\d,]*: (Killed|Terminated|Aborted|"
    r"Segmentation fault|Hangup)",
    re.M,
)
# srun's word for a node that slurmctld set DOWN under the job (it stopped answering: SlurmdTimeout).
_SRUN_NODE_FAILED = re.compile(r"^srun: error: Node failure on (\S+)", re.M)
_TORCHRUN_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


def signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _latest(records: list[dict], attempt: int | None = None) -> tuple[int, dict[int, list[dict]]]:
    if attempt is None:
        attempt = max((int(r.get(ATTEMPT, 0)) for r in records), default=0)
    by_rank: dict[int, list[dict]] = {}
    for r in records:
        if int(r.get(ATTEMPT, 0)) == attempt:
            by_rank.setdefault(int(r.get(RANK, 0)), []).append(r)
    return attempt, by_rank


def _last_step(recs: list[dict]) -> int:
    return max((r[STEP_NUMBER] for r in recs if r.get(EVENT) == STEP), default=0)


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
    folder = RunFolder(run_dir)
    path = folder.traceback_file(rank)
    if path.is_file():
        return path.read_text(errors="replace")
    for err in sorted(folder.torchrun_logs.glob("**/error.json")):  # torchrun's error file
        try:
            info = json.loads(err.read_text())["message"]
        except (ValueError, KeyError, TypeError):
            continue
        if err.parent.name == str(rank) and isinstance(info, dict):
            return info.get("extraInfo", {}).get("py_callstack", "")
    return record.get("traceback", "")


def _multi_rank(run_dir: Path) -> bool:
    try:
        return (RunFolder(run_dir).shape()["ranks"] or 1) > 1
    except Exception:  # noqa: BLE001 - no readable config: assume torchrun
        return True


def last_step(run_dir: Path) -> int:
    """The last step any rank of the latest attempt recorded."""
    _, by_rank = _latest([r for r in read_events(run_dir) if r.get(EVENT) == STEP])
    return max((_last_step(recs) for recs in by_rank.values()), default=0)


@dataclass
class Evidence:
    """What a failed run (or one failed attempt) left behind, read once for every rule."""

    run_dir: Path
    returncode: int | None
    log_text: str
    attempt: int
    agent_pid: int | None  # the torchrun agent the supervisor started, whose exit is `returncode`
    by_rank: dict[int, list[dict]]  # the attempt's records, heartbeats left out
    ends: dict[int, dict | None]  # each rank's last done/error record, None when it wrote none
    failed: list[dict]  # the ranks' failure records, earliest first

    @classmethod
    def read(
        cls, run_dir: Path, returncode: int | None, log_text: str, attempt: int | None, agent_pid: int | None
    ) -> "Evidence":
        records = [r for r in read_events(run_dir) if r.get(EVENT) != HEARTBEAT]
        attempt, by_rank = _latest(records, attempt)
        ends = {
            rank: next((r for r in reversed(recs) if r.get(EVENT) in ENDS), None)
            for rank, recs in by_rank.items()
        }
        failed = sorted(
            (r for r in ends.values() if r and r.get(STATUS) == "failed"), key=lambda r: r.get(TIME, 0)
        )
        return cls(run_dir, returncode, log_text, attempt, agent_pid, by_rank, ends, failed)

    @property
    def own(self) -> list[dict]:
        """Failures a rank caused itself, not its reaction to another rank's end."""
        return [r for r in self.failed if not is_knock_on(r)]

    @property
    def last_step(self) -> int:
        return max((_last_step(recs) for recs in self.by_rank.values()), default=0)


@dataclass
class Diagnosis:
    """How a failed run ended: the cause, the rank(s) at fault when there are any, and one line.
    The watchdog (while the run goes) and the rules below (once it has ended) both return one. The
    error type is derived from the cause (runfolder.error_type_of), except that a rank that raised
    gives its exception's class."""

    cause: str
    message: str
    error_type: str | None = None
    failed_rank: int | None = None
    failed_ranks: list[int] | None = None  # every rank the watchdog named
    signal: str | None = None
    traceback: str | None = None
    status: str | None = None  # set only when the run counts as stopped, not failed

    def __post_init__(self):
        if self.error_type is None and self.cause != "raised":
            self.error_type = error_type_of(self.cause)
        if self.failed_rank is None and self.failed_ranks:
            self.failed_rank = self.failed_ranks[0]

    def as_dict(self, attempt: int | None = None) -> dict:
        fields = {k: v for k, v in vars(self).items() if v is not None or k == "error_type"}
        return fields if attempt is None else {**fields, ATTEMPT: attempt}


def stall_message(
    rank: int, step: int, *, where: str = "", quiet_s: float | None = None, how: str = ""
) -> str:
    """The one wording of a stalled rank, for the watchdog while the run goes and for the
    diagnosis after it: 'rank 1 stalled after step 2: no progress for 31 s, still alive, last
    seen in forward (model.py:12)'. `how`: what its process was seen doing (frozen, alive)."""
    text = f"rank {rank} stalled after step {step}"
    if quiet_s is not None:
        text += f": no progress for {quiet_s:.0f} s"
    if how:
        text += f", {how}"
    return text + (f", last seen in {where}" if where else "")


def _disk_full(e: Evidence) -> Diagnosis | None:
    if e.own and e.own[0].get("error_type") == "DiskFull":
        r = e.own[0]
        rank = int(r[RANK])
        return Diagnosis(
            "disk_full",
            f"rank {rank} stopped after step {_last_step(e.by_rank[rank])}: {r.get(MESSAGE)}",
            failed_rank=rank,
        )
    return None


def _raised(e: Evidence) -> Diagnosis | None:
    """A rank raised by itself: its traceback, not the others' reactions."""
    if not e.own:
        return None
    r = e.own[0]
    rank = int(r[RANK])
    # a refusal (ConfigError) is its one line; its traceback stays in the rank's file in the folder
    refused = r.get("error_type") == ConfigError.__name__
    return Diagnosis(
        "raised",
        f"rank {rank} raised {r.get('error_type')} {_when(r, e.by_rank[rank])}: {r.get(MESSAGE)}",
        r.get("error_type"),
        failed_rank=rank,
        traceback=None if refused else traceback_of(e.run_dir, rank, r),
    )


def _agent_killed(e: Evidence) -> Diagnosis | None:
    if e.agent_pid is None or e.returncode is None or e.returncode >= 0:
        return None
    how = signal_name(e.returncode)
    oom = " (SIGKILL: the kernel's OOM killer, or another program)" if e.returncode == -signal.SIGKILL else ""
    return Diagnosis(
        "agent_killed",
        f"the torchrun agent (pid {e.agent_pid}) was killed by {how} after step "
        f"{e.last_step}, and its ranks ended with it; no rank failed by itself{oom}",
        signal=how,
    )


def _node_lost(e: Evidence) -> Diagnosis | None:
    """A SLURM job lost a node (srun says which first): its task there died by a signal (the
    node's torchrun agent was killed), or slurmctld found the node not answering and set it DOWN
    (its link cut, the machine gone); its ranks were lost with it."""
    found = _SRUN_LOST.search(e.log_text)
    failed = _SRUN_NODE_FAILED.search(e.log_text)
    if found is None and failed is None:
        return None
    first = min((m for m in (found, failed) if m), key=lambda m: m.start())
    node = first.group(1)
    ranks = sorted(
        rank
        for rank, recs in e.by_rank.items()
        if any(r.get(EVENT) == START and r.get(NODE) == node for r in recs)
    )
    theirs = f"its rank(s) {', '.join(map(str, ranks))}" if ranks else "its ranks"
    if first is failed:
        how = (
            f"SLURM found it not answering and set it DOWN after step {e.last_step}, and "
            f"{theirs} with it (its link cut or the machine gone)"
        )
    else:
        task, killed = found.group(2, 3)
        how = (
            f"srun's task {task} there (its torchrun agent) was {killed.lower()} after step "
            f"{e.last_step}, and {theirs} with it"
        )
    return Diagnosis(
        "node_lost",
        f"lost node {node}: {how}; no rank failed by itself",
        failed_rank=ranks[0] if ranks else None,
    )


def _agent_signalled(e: Evidence) -> Diagnosis | None:
    """torchrun got a signal, stopped its ranks and exited."""
    signalled = {int(pid): int(sig) for pid, sig in _AGENT_SIGNAL.findall(e.log_text)}
    if e.agent_pid is None or e.agent_pid not in signalled:
        return None
    how = signal_name(-signalled[e.agent_pid])
    return Diagnosis(
        "agent_signalled",
        f"the torchrun agent (pid {e.agent_pid}) got {how} from another program and "
        f"stopped every rank after step {e.last_step}",
        signal=how,
        status="stopped",
    )


def _rank_signalled(e: Evidence) -> Diagnosis | None:
    """The first rank to end stopped on a signal nobody in the workbench sent (a Stop or a
    watchdog's stop is recorded before the diagnosis is asked): another program signalled it.
    A rank that hung is stopped only after the others have failed, so it is not first."""
    ended = sorted((r for r in e.ends.values() if r and r.get(EVENT) == ERROR), key=lambda r: r.get(TIME, 0))
    if not ended or ended[0].get(STATUS) != "stopped":
        return None
    r = ended[0]
    rank = int(r[RANK])
    found = re.search(r"signal (SIG[A-Z0-9]+)", str(r.get(MESSAGE, "")))
    how = found.group(1) if found else "a signal"
    others = " (the other ranks ended after it)" if len(e.by_rank) > 1 else ""
    return Diagnosis(
        "rank_signalled",
        f"rank {rank} got {how} from another program after step "
        f"{_last_step(e.by_rank[rank])} and stopped{others}",
        failed_rank=rank,
        signal=how,
        status="stopped",
    )


def _killed(e: Evidence) -> Diagnosis | None:
    """A rank that wrote no end record died by a signal, or exited without saying why."""
    codes = torchrun_exit_codes(e.log_text)
    if e.returncode and len(e.by_rank) <= 1:
        codes.setdefault(next(iter(e.by_rank), 0), e.returncode)  # one process: the supervisor's child
    silent = [rank for rank, end in e.ends.items() if end is None]
    killed = silent or [rank for rank, code in codes.items() if code == -signal.SIGKILL]
    if not killed:
        return None
    rank = min(killed)
    step = _last_step(e.by_rank.get(rank, []))
    if rank not in codes and e.returncode is None:  # no exit code known (a tracked script's rank)
        return Diagnosis(
            "killed",
            f"rank {rank} ended without a record after step {step}: "
            "killed by a signal it cannot catch (SIGKILL: the kernel's OOM killer, or "
            "another program), or the process crashed",
            failed_rank=rank,
        )
    code = codes.get(rank, -signal.SIGKILL)
    if code >= 0:  # no signal: exit() or os._exit() in the code the rank ran, or a native library
        return Diagnosis(
            "exited",
            f"rank {rank} exited with code {code} after step "
            f"{step} without reporting an error: the "
            f"code it ran called exit() or os._exit(), or a library ended the process",
            failed_rank=rank,
        )
    how = signal_name(code)
    oom = (
        " - most likely out of memory (the kernel's OOM killer sends SIGKILL); lower the "
        "batch size or the model size, or check `dmesg`"
        if code == -signal.SIGKILL
        else ""
    )
    return Diagnosis(
        "killed", f"rank {rank} was killed by {how} after step {step}{oom}", failed_rank=rank, signal=how
    )


def _stalled(e: Evidence) -> Diagnosis | None:
    """The others timed out waiting for a rank that never raised: it hung."""
    stalled = [rank for rank, end in e.ends.items() if end and end.get(STATUS) == "stopped"]
    if not (e.failed and stalled):
        return None
    rank = stalled[0]
    beats = [
        r
        for r in read_events(e.run_dir)
        if r.get(EVENT) == HEARTBEAT and r.get(RANK) == rank and int(r.get(ATTEMPT, 0)) == e.attempt
    ]
    where = beats[-1].get("where", "") if beats else ""
    return Diagnosis(
        "stalled",
        f"{stall_message(rank, _last_step(e.by_rank[rank]), where=where)}; "
        f"the others timed out waiting for it: {e.failed[0].get(MESSAGE)}",
        failed_rank=rank,
    )


def _first_failure(e: Evidence) -> Diagnosis | None:
    """Only knock-on errors: the earliest is the best lead."""
    if not e.failed:
        return None
    r = e.failed[0]
    rank = int(r[RANK])
    return Diagnosis(
        "raised",
        f"rank {rank}: {r.get('error_type')}: {r.get(MESSAGE)}",
        r.get("error_type"),
        failed_rank=rank,
        traceback=traceback_of(e.run_dir, rank, r),
    )


def _rendezvous(e: Evidence) -> Diagnosis | None:
    """torchrun gave up before starting any rank."""
    if e.by_rank or not _multi_rank(e.run_dir):
        return None
    errors = [ln.strip() for ln in e.log_text.splitlines() if "Error" in ln and ":" in ln]
    why = f": {errors[-1][-400:]}" if errors else ""
    return Diagnosis(
        "rendezvous",
        f"torchrun exited with code {e.returncode} before any rank started, so the "
        f"rendezvous failed; check that the endpoint is reachable and every node uses "
        f"the same one{why}",
    )


def _exited(e: Evidence) -> Diagnosis:
    return Diagnosis(
        "exited",
        f"the launcher exited with code {e.returncode} before any "
        f"rank reported an error; see {RunFolder(e.run_dir).log_file.name}",
    )


# The rules in the order they are asked; the first that recognises the evidence names the cause.
RULES = (
    _disk_full,
    _raised,
    _agent_killed,
    _node_lost,
    _agent_signalled,
    _killed,
    _rank_signalled,
    _stalled,
    _first_failure,
    _rendezvous,
    _exited,
)


def diagnose(
    run_dir: Path,
    returncode: int | None,
    log_text: str = "",
    attempt: int | None = None,
    agent_pid: int | None = None,
) -> dict:
    """Name the rank at fault in a failed run (or in one failed attempt) and say what happened to
    it. `agent_pid`: the torchrun agent the supervisor started, whose exit is `returncode`."""
    evidence = Evidence.read(run_dir, returncode, log_text, attempt, agent_pid)
    found = next(d for rule in RULES if (d := rule(evidence)) is not None)
    return found.as_dict(evidence.attempt)


def disk_is_full(run_dir: Path) -> str | None:
    """Probe the run folder's disk with a small write (before the reserve is given back): the
    message to show when it fails for lack of space, else None."""
    probe = run_dir / ".space-probe"
    try:
        with open(probe, "wb") as f:
            f.write(b"\0" * 8192)
            f.flush()
    except OSError as e:
        if e.errno in DISK_FULL:
            return disk_message(run_dir, e, "writing the run folder")
    finally:
        try:
            probe.unlink()
        except OSError:
            pass
    return None


def restarts(run_dir: Path, log_text: str) -> list[dict]:
    """The diagnosis of every attempt torchrun restarted after (distributed.max_restarts)."""
    attempts = sorted({int(r.get(ATTEMPT, 0)) for r in read_events(run_dir)})
    out = []
    for a in attempts[:-1]:
        d = diagnose(run_dir, None, log_text, attempt=a)
        out.append({k: d[k] for k in (ATTEMPT, "cause", "failed_rank", "message") if k in d})
    return out


def finish_summary(
    run_dir: Path,
    world_size: int,
    returncode: int | None,
    stop: dict | None = None,
    failure: Diagnosis | None = None,
    agent_pid: int | None = None,
) -> Summary:
    """Write the final summary.json: rank 0's own summary when the run completed, otherwise what
    happened and which rank was at fault. `stop`: {cause, message} when the run was ended on
    purpose; `failure`: the watchdog's diagnosis, which wins over what the processes did after.
    Returns it."""
    disk = disk_is_full(run_dir)
    Reserve(run_dir).release()  # the room for this summary, even on a full disk
    folder = RunFolder(run_dir)
    summary = read_summary(run_dir)
    log_text = folder.log_tail(n_chars=None)
    again = restarts(run_dir, log_text)
    if returncode == 0 and summary.get("status") in ("completed", "diverged") and not failure:
        info = {}
    elif failure:
        info = {"status": "failed", **failure.as_dict()}
    elif stop:
        info = {"status": "stopped", "error_type": error_type_of(stop["cause"]), **stop}
    elif disk:
        for err in folder.torchrun_logs.glob("**/error.json"):
            if err.stat().st_size == 0:  # a rank's knock-on error, cut to nothing by the full disk
                err.unlink()
        info = {
            "status": "failed",
            "cause": "disk_full",
            "error_type": error_type_of("disk_full"),
            "message": f"{disk} (the run stopped after step {last_step(run_dir)})",
        }
    else:
        info = {"status": "failed", **diagnose(run_dir, returncode, log_text, agent_pid=agent_pid)}
    summary = {k: v for k, v in summary.items() if k not in ("traceback", RANK)}
    summary.update(info, **{WORLD_SIZE: world_size, FINAL_KEY: returncode})
    if again:
        summary.update(
            restarts=again,
            attempts=len(again) + 1,
            restarted=restart_sentence(again, summary.get("resumed_from_step")),
        )
    folder.write_summary(summary)
    return summary


def settle_tracked(run_dir: Path) -> Summary | None:
    """A tracked script's run of several ranks (workbench.tracking) has no supervisor: once every
    process is gone, name the rank at fault as the supervisor would (rank 0's own summary may blame
    it for another rank's knock-on error) and make the summary final. None when there is nothing to
    settle: not a script's run, one process (its own summary is final), still running, final, or
    a damaged record."""
    folder = RunFolder(run_dir)
    try:
        if not folder.is_script() or folder.final():
            return None
        ranks = folder.shape()["ranks"] or 1
    except ConfigError:
        return None  # a damaged record: the listing says so
    if ranks < 2 or processes_alive(run_dir) is not False:
        return None
    ended = read_summary(run_dir).get("status") in ("completed", "diverged")
    return finish_summary(run_dir, ranks, 0 if ended else None)


def restart_sentence(again: list[dict], resumed: int | None) -> str:
    """'restarted once, resumed after step 4; attempt 0: rank 1 raised ValueError ...' for a run that
    torchrun restarted (distributed.max_restarts)."""
    times = "once" if len(again) == 1 else f"{len(again)} times"
    where = (
        f"resumed after step {resumed}"
        if resumed
        else "each attempt from step 0 (nothing saved to resume from: run.save_every)"
    )
    return f"restarted {times}, {where}; attempt {again[0][ATTEMPT]}: {again[0]['message']}"


def ended_by_supervisor(run_dir: Path) -> bool:
    """Whether summary.json is the supervisor's final word (rank 0 writes one of its own too)."""
    return RunFolder(run_dir).final()


def record_supervisor_death(run_dir: Path, pid: int, returncode: int, wait_s: float = 10.0) -> Summary:
    """The supervisor itself died by a signal, so no one wrote how the run ended: end what is left of
    it (its ranks die with their parents; wait for that, then kill stragglers) and write the summary.
    Called by the launching process."""
    ranks = [(r[PID], r.get(CREATED_T)) for r in read_events(run_dir) if r.get(EVENT) == START and r.get(PID)]
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(same_process(*p) for p in ranks):
        time.sleep(0.1)
    for p, created in ranks:
        if same_process(p, created):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
    step = last_step(run_dir)
    folder = RunFolder(run_dir)
    reason = folder.stop_reason()
    how = signal_name(returncode)
    if reason is not None:
        info = {
            "status": "stopped",
            "cause": "stopped",
            "error_type": error_type_of("stopped"),
            "message": f"{reason} (the supervisor did not stop in time and was killed by {how})",
        }
    else:
        info = {
            "status": "failed",
            "cause": "supervisor_killed",
            "error_type": error_type_of("supervisor_killed"),
            "signal": how,
            "message": f"the supervisor (pid {pid}) was killed by {how} after step {step}, so its "
            "ranks were ended with it; nothing in the run itself failed",
        }
    summary = {k: v for k, v in read_summary(run_dir).items() if k in ("steps", "final_loss")}
    summary.update(info, **{FINAL_KEY: returncode})
    Reserve(run_dir).release()
    try:
        folder.write_summary(summary)
    except OSError:
        pass
    return summary
