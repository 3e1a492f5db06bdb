"""One run folder: the protocol between the launcher, the supervisor, the ranks and every reader,
and the only module that names its files.

    folder = RunFolder(run_dir)
    folder.config()                # the run's RunConfig (config.json)
    folder.events_file(rank)       # where that rank appends its events (workbench.events)
    folder.summary()               # summary.json (a Summary), or None while none is written
    folder.final()                 # whether the supervisor has recorded how the run ended

Who writes what: the launcher claims the folder (RUN_ID), writes config.json and launch.json (the
command and the supervisor's pid); each rank appends rankR.jsonl and, on an error, its traceback;
rank 0 writes the weights and a first summary.json; with run.save_every every rank writes its
part of the resumable state into resume/; the supervisor completes summary.json with the return
code (then the summary is final) and moves torchrun's logs in; a stop request is stop_reason.txt.
Plain files only: nothing here imports what a config names, and the rank side may import it (it
imports only the config and the disk helpers).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

from .config import ConfigError, RunConfig
from .disk import disk_message, write_atomic, write_json_atomic

CONFIG = "config.json"  # the run's RunConfig, written once when the folder is claimed
SUMMARY = "summary.json"  # how the run ended; final once it has the return code
LAUNCH = "launch.json"  # the command and the supervisor's pid and start time
STOP_REASON = "stop_reason.txt"  # why the user (or a timeout) stopped the run
LAUNCHER_LOG = "launcher.log"  # the supervisor's and torchrun's output
TORCHRUN_LOGS = "torchrun_logs"  # torchrun's per-rank logs (several ranks)
WEIGHTS = "model.pt"  # the trained weights (rank 0)
# The resumable state (run.save_every), one format under every strategy: a folder per saved step,
# each rank's part in torch.distributed.checkpoint's files; a restart continues from the newest.
RESUME = "resume"
SAVED_STEP = "step{step:08d}"  # one complete saved state in RESUME
SAVING = ".partial"  # a state still being written there: never loaded
STATE_INDEX = "workbench-index.json"  # a saved state's files, their bytes and SHA-256 (no torch to read)
EARLIER_STATES = ("resume.pt", "resume_sharded")  # what versions before that one format wrote
RUN_ID = ".workbench-run"  # a random id, written once when the folder is claimed (provenance)
EVENTS = "rank{rank}.jsonl"
TRACEBACK = "rank{rank}.traceback.txt"
PROFILE = "profile_rank{rank}.json"  # the profiled steps' phases, operators and memory
TRACE = "trace_rank{rank}.json"  # Chrome/Perfetto trace of the profiled steps
JOB = "slurm_job.json"  # a submitted run's SLURM job id and how to reach its cluster
JOB_FILE = "job.slurm"  # the batch file a submitted run was started with
SCRIPT = "script.json"  # a user's own script tracked by workbench.track: its command and settings
LOAD_REPORT = "load.json"  # a load run's levels, each with its percentiles (workbench load)
FINAL_KEY = "returncode"  # the key the supervisor adds when it completes the summary


def error_type_of(cause: str) -> str:
    """The error type a summary gives the cause of a run's end, derived from the cause's name
    (start_timeout -> StartTimeout), so the two cannot drift apart. Only a rank that raised keeps
    its exception's own class instead (its cause is `raised`)."""
    return "".join(word.capitalize() for word in cause.split("_"))


class Summary(TypedDict, total=False):
    """summary.json, key by key. Rank 0 writes its figures when its steps end (or why it failed);
    the supervisor completes it with how the run ended, FINAL_KEY last (then it is final). A failed
    run holds few of these, so every key is optional and readers ask with .get. A figure a step
    record carries too has the name workbench.events gives it. tests/e2e/test_run_folders.py checks
    that a real run writes nothing undeclared here."""

    # how the run ended: rank 0's outcome, then the supervisor's (workbench.distributed.faults)
    status: str  # completed | diverged | failed | stopped (read_summary: running, empty too)
    message: str  # one line: why it failed, stopped or diverged
    returncode: int | None  # FINAL_KEY: the supervisor's exit code; present once final
    cause: str  # what ended a failed or stopped run (raised, killed, stalled, ...)
    error_type: str  # the exception's class, or error_type_of(cause) (Stalled, DiskFull, ...)
    failed_rank: int  # the rank at fault, when one is
    failed_ranks: list[int]  # every rank the watchdog named (stalled, or not ready in time)
    rank: int  # the failing rank in rank 0's own record of an error (dropped once final)
    phase: str  # what that rank was doing ("building the model", "step 3")
    signal: str  # the signal that ended a process ("SIGKILL")
    traceback: str  # the rank at fault's traceback
    attempt: int  # the attempt the diagnosis is about (distributed.max_restarts)
    restarts: list[dict]  # each earlier attempt's diagnosis: attempt, cause, failed_rank, message
    attempts: int  # how many attempts ran, when torchrun restarted any
    slurm: dict  # a submitted run's job id, state, reason and exit code
    # the steps
    steps: int  # the steps run, an earlier attempt's included
    steps_planned: int  # run.steps, when the time budget ended the steps first
    ended_by: str  # steps | time_budget
    ended_note: str  # what ended the steps, in words
    trial_variant: bool  # a trial's variant (workbench.train.host): its steps ran in slices
    resumed_from_step: int  # the step a restarted attempt continued after
    restarted: str  # "restarted once, resumed after step 4; attempt 0: ..." (the supervisor)
    final_loss: float
    first_nonfinite_step: int
    nonfinite_losses: int  # how many losses were NaN or infinite
    skipped_steps: int  # fp16: steps the gradient scaler skipped
    grad_scale: float  # fp16: the loss scale at the end
    eval_loss: float  # on the held-out split (run.eval_batches)
    eval_accuracy: float
    param_sum: float  # every parameter summed: equal on every rank when DDP kept them in sync
    # where and how it ran
    world_size: int
    device: str
    precision: str
    params: int
    threads: int  # torch threads per rank
    threads_why: str  # why the launcher chose them, and what the warm-up's trial kept
    thread_trial: dict  # busy machine: each count's median warm-up step, the count kept, why
    wait_policy: str  # how OpenMP threads wait: default | passive
    allocator: str  # the memory allocator the ranks ran on: tcmalloc | system (machine.allocator)
    threads_note: str  # a tracked script on a busy machine: what the thread rule would change
    output_adapter: str  # where the model's logits were found (workbench.train.contract)
    output_shape: list[int]  # the logits' shape on one batch
    contention: dict  # what other programs did meanwhile (workbench.machine.contention)
    # the figures, after warm-up and without profiled steps
    time_to_first_step_s: float
    wall_s: float
    step_time_ms_median: float
    step_time_ms_p10: float
    step_time_ms_p90: float
    samples_per_s: float  # the whole run's, at the median step
    data_wait_frac: float  # the share of step time spent waiting for data
    flops_per_step: int
    tflops: float  # at the median step
    mfu: float  # of the peak named by mfu_basis
    mfu_dtype: str
    mfu_basis: str | None
    mfu_spec: float  # of the datasheet peak
    mfu_measured: float  # of the measured peak
    mfu_error: str  # why there is no MFU, or why a peak is wrong
    peak_tflops: float
    peak_when: str  # which measurement the measured peak is: when, and under which load
    spec_basis: str
    spec_tflops: float
    measured_tflops: float
    rss_gib: float  # memory at the end (workbench.train.memory_readings)
    mem_reserved_gib: float
    mem_peak_gib: float
    memory_per_rank: dict  # predicted and measured bytes per rank (workbench.train.trainer)
    profiled_steps: list[int]  # the steps run under the profiler (run.profile_steps)
    profile: str  # their breakdown's file, in the run folder


def is_final(summary: Summary | None) -> bool:
    """Whether the supervisor has recorded how the run ended: the one rule for a final summary."""
    return summary is not None and FINAL_KEY in summary


def read_json(path: str | Path) -> dict:
    """A JSON object from a run folder, or a one-line ConfigError naming the file."""
    try:
        data = json.loads(Path(path).read_text())
    except ValueError as e:
        raise ConfigError(f"{str(path)!r} is not valid JSON ({e}); the folder is damaged") from None
    except OSError as e:
        raise ConfigError(disk_message(path, e, "reading")) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{str(path)!r} holds {type(data).__name__}, not a JSON object; the folder is damaged"
        )
    return data


def _numbered(pattern: str, path: Path) -> int:
    """The rank in a per-rank file name (rank3.jsonl -> 3)."""
    head, tail = pattern.split("{rank}")
    return int(path.name[len(head) : len(path.name) - len(tail)])


def saved_steps(resume_dir: Path) -> dict[int, Path]:
    """The whole saved states in a RESUME folder by step (the one being written left out); {}
    when none is saved. Copied into exported scripts, which keep the same folder."""
    head = SAVED_STEP.split("{")[0]
    if not resume_dir.is_dir():
        return {}
    return {
        int(p.name[len(head) :]): p
        for p in resume_dir.iterdir()
        if p.name.startswith(head) and p.name[len(head) :].isdigit() and p.is_dir()
    }


class RunFolder:
    """The files of one run, read and written by name. Holds no state but the path."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    # --- where things are --------------------------------------------------------------------
    @property
    def config_file(self) -> Path:
        return self.path / CONFIG

    @property
    def summary_file(self) -> Path:
        return self.path / SUMMARY

    @property
    def launch_file(self) -> Path:
        return self.path / LAUNCH

    @property
    def stop_file(self) -> Path:
        return self.path / STOP_REASON

    @property
    def log_file(self) -> Path:
        return self.path / LAUNCHER_LOG

    @property
    def torchrun_logs(self) -> Path:
        return self.path / TORCHRUN_LOGS

    @property
    def weights_file(self) -> Path:
        return self.path / WEIGHTS

    @property
    def job_record_file(self) -> Path:
        return self.path / JOB

    @property
    def job_file(self) -> Path:
        return self.path / JOB_FILE

    def job(self) -> dict | None:
        """The SLURM job record of a submitted run, or None for a run started here."""
        return read_json(self.job_record_file) if self.job_record_file.is_file() else None

    def write_job(self, record: dict) -> None:
        write_json_atomic(self.job_record_file, record)

    @property
    def resume_dir(self) -> Path:
        return self.path / RESUME

    def saved_steps(self) -> dict[int, Path]:
        return saved_steps(self.resume_dir)

    def holds_resumable_state(self) -> bool:
        """Whether a run can go on from this folder: a whole saved step."""
        return bool(self.saved_steps())

    def earlier_state(self) -> Path | None:
        """A resumable state in a format that versions before the one format wrote, if any."""
        return next((self.path / n for n in EARLIER_STATES if (self.path / n).exists()), None)

    @property
    def run_id_file(self) -> Path:
        return self.path / RUN_ID

    def events_file(self, rank: int) -> Path:
        return self.path / EVENTS.format(rank=rank)

    def traceback_file(self, rank: int) -> Path:
        return self.path / TRACEBACK.format(rank=rank)

    def profile_file(self, rank: int) -> Path:
        return self.path / PROFILE.format(rank=rank)

    def trace_file(self, rank: int) -> Path:
        return self.path / TRACE.format(rank=rank)

    def events_files(self) -> list[Path]:
        """Every rank's events file, by rank."""
        return self._per_rank(EVENTS)

    def traceback_files(self) -> list[Path]:
        return self._per_rank(TRACEBACK)

    def is_rank_file(self, path: Path) -> bool:
        """A file one rank writes for itself (its events, its traceback), by its name alone."""
        for pattern in (EVENTS, TRACEBACK):
            head, tail = pattern.split("{rank}")
            middle = path.name[len(head) : len(path.name) - len(tail)]
            if path.name.startswith(head) and path.name.endswith(tail) and middle.isdigit():
                return True
        return False

    def profile_files(self) -> list[Path]:
        return self._per_rank(PROFILE)

    def _per_rank(self, pattern: str) -> list[Path]:
        files = [
            p
            for p in self.path.glob(pattern.format(rank="*"))
            if p.name[len(pattern.split("{rank}")[0]) :].split(".")[0].isdigit()
        ]
        return sorted(files, key=lambda p: _numbered(pattern, p))

    # --- the config ----------------------------------------------------------------------------
    def holds_run(self) -> bool:
        """A folder with a config, or a tracked script's record: a run was claimed here (whatever
        became of it)."""
        return self.config_file.is_file() or self.script_file.is_file()

    @property
    def script_file(self) -> Path:
        return self.path / SCRIPT

    def is_script(self) -> bool:
        """A user's own script ran here (workbench.track), not the workbench's trainer: there is
        no RunConfig, and nothing here names code the workbench could load."""
        return self.script_file.is_file() and not self.config_file.is_file()

    def script(self) -> dict:
        return read_json(self.script_file)

    @property
    def load_report_file(self) -> Path:
        return self.path / LOAD_REPORT

    def write_script(self, record: dict) -> None:
        write_json_atomic(self.script_file, record)

    def shape(self) -> dict:
        """What every listing shows of a run, from its config or its script's record without
        building either: model, precision, ranks, batch_size, and steps (None: not known ahead).
        A one-line ConfigError when the file lacks a part (the folder is damaged)."""
        if self.is_script():
            record = self.script()
            keys = ("model", "precision", "ranks", "batch_size", "steps")
            return {k: record.get(k) for k in keys}
        cfg = self.config_data()
        try:
            return {
                "model": cfg["model"]["name"],
                "precision": cfg["precision"]["dtype"],
                "ranks": cfg["distributed"]["nproc"] * cfg["distributed"]["nnodes"],
                "batch_size": cfg["loader"]["batch_size"],
                "steps": None if cfg["run"].get("time_budget_s") else cfg["run"]["steps"],
            }
        except (KeyError, TypeError) as e:
            raise ConfigError(f"{str(self.config_file)!r} lacks {e}; the folder is damaged") from None

    def config(self) -> RunConfig:
        return RunConfig.load(self.config_file)

    def config_data(self) -> dict:
        """The config as plain data, without building it: a damaged one still lists."""
        return read_json(self.config_file)

    def write_config(self, cfg: RunConfig) -> None:
        cfg.save(self.config_file)

    # --- the summary ---------------------------------------------------------------------------
    def summary(self) -> Summary | None:
        """summary.json, or None while no process has written it."""
        return read_json(self.summary_file) if self.summary_file.is_file() else None

    def write_summary(self, summary: Summary) -> None:
        write_json_atomic(self.summary_file, summary)

    def final(self) -> bool:
        """Whether the supervisor has recorded how the run ended (the summary has its return code).
        A summary written by rank 0 alone is not final: the supervisor may still name a fault."""
        try:
            return is_final(self.summary())
        except ConfigError:
            return False

    # --- the launch record, the stop request, the log ----------------------------------------
    def launch(self) -> dict | None:
        return read_json(self.launch_file) if self.launch_file.is_file() else None

    def write_launch(self, record: dict) -> None:
        write_json_atomic(self.launch_file, record)

    def stop_reason(self) -> str | None:
        """Why the run was asked to stop, or None when nobody asked."""
        try:
            return self.stop_file.read_text().strip() or "stopped"
        except FileNotFoundError:
            return None

    def ask_stop(self, reason: str) -> None:
        write_atomic(self.stop_file, reason)

    def log_tail(self, n_chars: int | None = 2000) -> str:
        """The end of launcher.log (all of it with None); "" when there is none."""
        path = self.log_file
        text = path.read_text(errors="replace") if path.is_file() else ""
        return text if n_chars is None else text[-n_chars:]
