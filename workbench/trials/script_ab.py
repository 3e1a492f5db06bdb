"""The A/B test of two commands: your own training scripts, each tracked by `workbench.track`,
through the trial engine (workbench.trials.engine) with the same pairing, statistics and verdict
rule as every other A/B.

    result = command_ab(Command("python train.py"), Command("python train.py --bf16"), budget_s=5)
    print(result.text())   # 'B vs A: 0.41x [0.38, 0.44] over 6 pairs, quiet: slower ...'

A command cannot be hosted warm and switched in slices, so each slice is one whole run: the
command started afresh with $WORKBENCH_RUN_DIR (its run folder, inside the trial's folder) and
$WORKBENCH_TIME_BUDGET_S (the tracker ends its steps when the budget is spent). The runs
alternate A B, B A, ...; a run's rate is its samples over its step time after its own warm-up steps,
so the process start and the script's setup are in neither side's figure. An A/A test (the same
command twice) comes out within noise.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..config import ConfigError, DistributedConfig
from ..disk import make_dirs, open_log
from ..distributed.faults import finish_summary
from ..events import (
    EVENT,
    LOSS,
    MEM_PEAK_GIB,
    RANK,
    RSS_GIB,
    SAMPLES_PER_S,
    STEP,
    STEP_TIME_MS,
    WORLD_SIZE,
    RunTail,
    read_events,
)
from ..measure.ratios import median_interval, min_rounds
from ..measure.verdict import MIN_EFFECT
from ..measure.warmup import warmup_steps
from ..runfolder import RunFolder
from ..runstore import read_summary, runs_root
from ..tracking.place import RUN_DIR_ENV
from ..tracking.tracked_run import BUDGET_ENV
from .engine import Comparison, Slice, Trial
from .hosts import TrialError

BUDGET_S = 5.0  # seconds of steps a run: its setup and warm-up come on top
START_ALLOWANCE_S = 300.0  # a run's Python, imports, data and model before its first step
FIRST_STEP_S = DistributedConfig.start_timeout_s  # a run with no step by then hangs: ended, and said
NO_STEP = -1000  # _run's answer for a run the workbench ended for making no step


@dataclass(frozen=True)
class Command:
    """A command line (split as a shell would, run without one) and the environment it adds."""

    line: str
    env: dict = field(default_factory=dict)

    def argv(self) -> list[str]:
        try:
            argv = shlex.split(self.line)
        except ValueError as e:
            raise ConfigError(f"--cmd {self.line!r} is not a command line ({e})") from None
        if not argv:
            raise ConfigError(
                "--cmd is empty: give the command that runs your script, e.g. --cmd \"python train.py\""
            )
        return argv

    def text(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.env.items())
        return f"{extra} {self.line}".strip()


def parse_env(items: list[str], flag: str) -> dict:
    """KEY=VALUE settings of an environment, or a one-line refusal naming the bad one."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ConfigError(f"{flag} {item!r} is not KEY=VALUE (a variable name, '=', its value)")
        out[key] = value
    return out


class Interrupted(Exception):
    """The user asked the comparison to stop (Ctrl-C): the run under way was ended, not counted."""


class CommandHost:
    """Runs each slice as one whole run of its side's command (see the module)."""

    def __init__(
        self,
        commands: dict[str, Command],
        folder: Path,
        cwd: str | None = None,
        stop: Callable[[], bool] | None = None,
    ):
        self.commands, self.folder, self.cwd = commands, folder, cwd
        self.stop = stop or (lambda: False)
        self.runs: dict[str, list[Path]] = {label: [] for label in commands}
        self.ends: dict[Path, dict] = {}  # each run's peak memory and final loss, read with its slice
        for command in commands.values():
            command.argv()  # refused before anything runs

    def slice(self, label: str, seconds: float) -> Slice:
        n = len(self.runs[label])
        name = f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', label).strip('-')[:40] or 'side'}-{n}"
        run_dir = self.folder / name
        self.runs[label].append(run_dir)
        command = self.commands[label]
        env = {**os.environ, **command.env, RUN_DIR_ENV: str(run_dir), BUDGET_ENV: f"{seconds:g}"}
        env.pop("WORKBENCH_TREE_PID", None)  # the run is its own tree, not this process's
        tail = RunTail(run_dir)
        stepped = lambda: any(r.get(EVENT) == STEP for r in tail.poll())  # noqa: E731
        with open_log(self.folder / f"{name}.log") as log:
            code = _run(command.argv(), env, self.cwd, log, seconds + START_ALLOWANCE_S, self.stop, stepped)
        if code == NO_STEP:
            raise TrialError(
                f"{label}: `{command.text()}` made no step within {FIRST_STEP_S:g} s of starting "
                f"(distributed.start_timeout_s), so the workbench ended it: does it hang before its "
                f"loop, or wait for input? Its output: {self.folder / f'{name}.log'}"
            )
        s, self.ends[run_dir] = _slice_of(label, command, run_dir, code, self.folder / f"{name}.log")
        return s


def _run(
    argv: list[str],
    env: dict,
    cwd: str | None,
    log,
    timeout_s: float,
    stop: Callable[[], bool],
    stepped: Callable[[], bool] = lambda: True,
) -> int:
    """Run one command in a session of its own (every process it starts ends with it); its return
    code, its end by SIGTERM when it outlived `timeout_s`, or NO_STEP when it made no step
    (`stepped`) within FIRST_STEP_S. A stop asked meanwhile ends it at once and raises
    Interrupted."""
    try:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as e:
        raise ConfigError(f"--cmd {shlex.join(argv)!r} cannot start: {e.strerror}") from None
    started = time.monotonic()
    deadline, first_step = started + timeout_s, False
    try:
        while time.monotonic() < deadline:
            try:
                return proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                if stop():
                    _end(proc)
                    raise Interrupted() from None
                first_step = first_step or stepped()
                if not first_step and time.monotonic() - started > FIRST_STEP_S:
                    _end(proc)
                    return NO_STEP
        return _end(proc)
    finally:
        if proc.poll() is None:  # Ctrl-C here, or the timeout: nothing of it stays behind
            _end(proc)


def _end(proc: subprocess.Popen, grace_s: float = 5.0) -> int:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            return proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()


def _slice_of(label: str, command: Command, run_dir: Path, code: int, log: Path) -> tuple[Slice, dict]:
    """The run's rate after its warm-up steps, as a slice; a run that did not track or failed is
    a one-line TrialError naming it and its log."""
    folder = RunFolder(run_dir)
    if not folder.holds_run():
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.is_file() else []
        why = f" (its last line: {tail[0][-200:]})" if tail else ""
        raise TrialError(
            f"{label}: `{command.text()}` exited with code {code} without tracking a "
            f"run: does it call workbench.track()? Its output: {log}{why}"
        )
    if not folder.final():
        finish_summary(run_dir, folder.shape()["ranks"] or 1, code)  # name what ended it
    summary = read_summary(run_dir)
    if summary.get("status") not in ("completed", "diverged"):
        raise TrialError(
            f"{label}: `{command.text()}` {summary.get('status')}: "
            f"{summary.get('message', 'no reason recorded')} (its output: {log})"
        )
    rank0 = [r for r in read_events(run_dir) if r.get(RANK) == 0]
    steps = [r for r in rank0 if r.get(EVENT) == STEP]
    kept = steps[warmup_steps(len(steps)) :]
    wall = sum(r[STEP_TIME_MS] for r in kept) / 1e3
    work = sum(r[SAMPLES_PER_S] * r[STEP_TIME_MS] / 1e3 for r in kept if r.get(SAMPLES_PER_S))
    if not kept or not work:
        raise TrialError(
            f"{label}: `{command.text()}` recorded no samples in {len(steps)} steps: "
            "give run.step(samples=...) or run.log_step(samples=...) the batch size"
        )
    contention = summary.get("contention") or {}
    s = Slice(
        label,
        work * (summary.get(WORLD_SIZE) or 1),
        wall,
        0.0,
        contention.get("other_cpu_cores"),
        steps=len(steps),
        losses=[r[LOSS] for r in steps if LOSS in r],
        threads=summary.get("threads"),
    )
    return s, {"peak_gib": peak_memory_gib(rank0), "final_loss": summary.get("final_loss")}


def peak_memory_gib(records: list[dict]) -> float | None:
    """The most memory a rank's records show it held: the allocator's peak on a GPU, else the RSS."""
    readings = [r.get(MEM_PEAK_GIB, r.get(RSS_GIB)) for r in records]
    return max((v for v in readings if v is not None), default=None)


@dataclass
class CommandABResult:
    labels: tuple[str, str]
    commands: tuple[Command, Command]
    comparison: Comparison  # B against A
    runs: dict  # label -> each counted run: its folder, steps, samples/s, peak memory, final loss
    folder: str
    budget_s: float

    def side(self, label: str) -> dict:
        """A side's figures over its counted runs: median steps, samples/s with its interval,
        peak memory (the largest), median final loss."""
        runs = self.runs[label]
        rates = [r[SAMPLES_PER_S] for r in runs]
        losses = [r["final_loss"] for r in runs if r["final_loss"] is not None]
        peaks = [r["peak_gib"] for r in runs if r["peak_gib"] is not None]
        interval = median_interval(rates)
        return {
            "runs": len(runs),
            "steps": statistics.median([r["steps"] for r in runs]) if runs else None,
            SAMPLES_PER_S: statistics.median(rates) if rates else None,
            "samples_per_s_interval": list(interval) if interval else None,
            "peak_gib": max(peaks) if peaks else None,
            "final_loss": statistics.median(losses) if losses else None,
        }

    def text(self) -> str:
        a, b = self.labels
        same = self.commands[0] == self.commands[1]
        lines = [
            f"A: {self.commands[0].text()}",
            f"B: {self.commands[1].text()}"
            + (" (the same command: an A/A test, whose verdict should be within noise)" if same else ""),
            f"{b} vs {a}: {self.comparison.text()}",
            f"  each run: a fresh process, {self.budget_s:g} s of steps "
            f"(${BUDGET_ENV}); its warm-up steps, setup and start-up left out",
        ]
        for label in self.labels:
            s = self.side(label)
            if not s["runs"]:
                continue
            ci = s["samples_per_s_interval"]
            rate = f"{s[SAMPLES_PER_S]:,.0f}" + (f" [{ci[0]:,.0f}, {ci[1]:,.0f}]" if ci else "")
            peak = f"{s['peak_gib']:.2f} GiB" if s["peak_gib"] is not None else "not read"
            loss = f"{s['final_loss']:.4g}" if s["final_loss"] is not None else "not recorded"
            lines.append(
                f"  {label}: {s['runs']} runs, {s['steps']:g} steps a run, samples/s {rate}, "
                f"peak memory {peak}, final loss {loss}"
            )
        lines.append(f"  every run's folder and output: {self.folder}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {
            "a": self.labels[0],
            "b": self.labels[1],
            "commands": [c.text() for c in self.commands],
            "budget_s": self.budget_s,
            **self.comparison.as_dict("speedup"),
            "label": self.comparison.text(),
            "sides": {label: self.side(label) for label in self.labels},
            "runs": self.runs,
            "folder": self.folder,
        }


def command_ab(
    a: Command,
    b: Command,
    rounds: int | None = None,
    labels: tuple[str, str] = ("A", "B"),
    *,
    budget_s: float = BUDGET_S,
    warmup: int = 1,
    min_effect: float = MIN_EFFECT,
    cwd: str | None = None,
    on_slice: Callable[[Slice], None] | None = None,
    stop: Callable[[], bool] | None = None,
    folder: str | Path | None = None,
) -> CommandABResult:
    """`rounds` pairs of runs of A and B (default: the fewest that carry a 95 % interval), each
    ending after `budget_s` seconds of steps, after `warmup` uncounted runs of each.

    :param a: side A's command, the reference: the ratio is B's samples/s over A's.
    :param b: side B's command.
    :param rounds: the pairs to count (a pair dropped because the load changed inside it is measured
        again, up to as many extra rounds); None: the fewest that carry a 95 % interval.
    :param labels: the two sides' names, A's then B's; they must differ.
    :param budget_s: seconds of steps a run takes, from its first step, before its tracker ends it; its
        start-up and setup come on top.
    :param warmup: runs of each side made first and counted nowhere.
    :param min_effect: the smallest relative change (0.05: 5 %) that the verdict calls faster or slower.
    :param cwd: the folder the commands run in; None: this process's working folder.
    :param on_slice: called with each run's slice as it ends, warm-up runs included; None: nothing is called.
    :param stop: asked before each round and while a run goes; True ends the run under way, uncounted,
        and the test with the rounds done so far. None: every round runs.
    :param folder: the comparison's folder (each run's folder and output); None: a fresh one in the run
        store, removed again when a command cannot start.
    """
    rounds = rounds or min_rounds()
    if labels[0] == labels[1]:
        raise ValueError(f"the two sides need different labels, got {labels[0]!r} twice")
    made = folder is None  # the comparison's own folder: removed again if nothing could start
    folder = Path(folder) if folder else runs_root() / f"{time.strftime('%Y%m%d-%H%M%S')}_ab-cmd"
    host = CommandHost(dict(zip(labels, (a, b))), folder, cwd, stop)  # refuses before any folder
    make_dirs(folder)
    trial = Trial(
        {label: host for label in labels},
        labels[0],
        slice_s=budget_s,
        warmup=warmup,
        min_effect=min_effect,
        on_slice=on_slice,
    )
    try:
        trial.run(rounds, stop)
    except Interrupted:
        pass  # the rounds completed before it are the result; the one under way counts nowhere
    except ConfigError:  # a command that cannot start: refused, and nothing left behind
        if made:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    comparison = trial.compare(labels[1])
    runs = {}
    for label in labels:
        counted = host.runs[label][len(trial.warmups[label]) :][: len(trial.slices[label])]
        runs[label] = [
            {
                "run": str(path),
                "steps": s.steps,
                SAMPLES_PER_S: round(s.rate, 2),
                **host.ends[path],
                "other_cores": s.other_cores,
            }
            for path, s in zip(counted, trial.slices[label])
        ]
    result = CommandABResult(labels, (a, b), comparison, runs, str(folder), budget_s)
    _tag(result)
    return result


def _tag(result: CommandABResult) -> None:
    """Every counted run's record keeps the verdict it took part in (exported as tags)."""
    tags = {
        "ab_verdict": str(result.comparison.verdict),
        "ab_label": result.comparison.text(),
        "ab_a": result.commands[0].text(),
        "ab_b": result.commands[1].text(),
    }
    for label, runs in result.runs.items():
        for run in runs:
            folder = RunFolder(run["run"])
            try:
                record = folder.script()
                record["tags"] = {**record.get("tags", {}), **tags, "ab_side": label}
                folder.write_script(record)
            except (ConfigError, OSError):
                pass  # the result is printed either way
