"""A user's own training script under workbench.track: a real script in its own process writes a run
folder every reader reads (runs, compare, the dashboard), its end is recorded however it comes (the
loop's end, an exception, SIGTERM, Ctrl-C, a kill, the time budget), torchrun's ranks share one
folder with the rank at fault named, and `workbench ab --cmd` compares two commands with an
interval."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from launch_helpers import assert_all_gone, wait_for, wait_for_steps
from workbench.config import ConfigError
from workbench.events import LAST, STEP, read_events
from workbench.runfolder import RunFolder
from workbench.runstore import compare, list_runs, read_summary

ROOT = Path(__file__).resolve().parents[2]
LOOP = Path(__file__).parents[1] / "tracked_loop.py"


def start(run_dir: Path, *args: str, env: dict | None = None, torchrun: int = 0) -> subprocess.Popen:
    head = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={torchrun}"]
        if torchrun
        else [sys.executable]
    )
    return subprocess.Popen(
        [*head, str(LOOP), *args],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_as_a_terminal_would,
        env={**os.environ, "WORKBENCH_RUN_DIR": str(run_dir), **(env or {})},
    )


def _as_a_terminal_would() -> None:
    """Ctrl-C reaches the script as it does from a terminal: a test worker may ignore SIGINT, and a
    child inherits an ignored signal (then Python never turns it into KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_tracked_loop_is_a_run_every_reader_reads(runs_root, capsys):
    from workbench.cli import main as cli
    from workbench.ui import attach

    runs = {}
    for name, how in (("with", []), ("log", ["--log-step"])):
        runs[name] = runs_root / name
        proc = start(runs[name], "--steps", "25", *how)
        assert proc.wait(120) == 0, proc.stderr.read()
        assert f"tracking this run in {runs[name]}" in proc.stderr.read()
    for run_dir in runs.values():
        s = read_summary(run_dir)
        assert (s["status"], s["steps"], s["returncode"]) == ("completed", 25, 0), s
        assert s["samples_per_s"] > 0 and s["step_time_ms_median"] > 0 and s["final_loss"] > 0
        record = RunFolder(run_dir).script()
        assert record["params"]["steps"] == 25 and record["batch_size"] == 32
        assert record["command"][0].endswith("tracked_loop.py")
        steps = [r for r in read_events(run_dir) if r["event"] == STEP]
        assert [r["step"] for r in steps] == list(range(1, 26))
        assert all(r["step_time_ms"] > 0 and r["samples_per_s"] > 0 for r in steps)
    waits = {
        name: [r for r in read_events(d) if r["event"] == STEP and "data_wait_ms" in r]
        for name, d in runs.items()
    }
    assert len(waits["with"]) == 24  # every step after the first: the gap since the one before
    assert waits["log"] == []  # log_step cannot tell the wait from the step, so it says none
    listed = list_runs().set_index("run")
    assert list(listed.loc[["with", "log"], "status"]) == ["completed", "completed"]
    assert list(listed.loc[["with", "log"], "model"]) == ["tracked_loop", "tracked_loop"]
    table = compare([runs["with"], runs["log"]])
    assert list(table["verdict"])[0] == "baseline" and table["speedup"].notna().all()
    assert cli(["runs"]) == 0 and "tracked_loop" in capsys.readouterr().out
    dash = attach(runs["with"])
    assert dash.wait(60) and dash.series.status == "completed" and dash.series.last_step == 25
    dash.stop()
    from workbench.ui import compare_view

    view = compare_view([runs["with"], runs["log"]], picker=False)
    assert view.measure() is None and "workbench ab --cmd" in view.ab_status.value  # not its configs


def test_an_exception_in_the_loop_is_recorded_with_its_traceback(runs_root):
    proc = start(runs_root / "fails", "--fail-at", "3")
    assert proc.wait(120) == 1
    assert "ValueError: the loop failed at step 3" in proc.stderr.read()  # the user's hook still prints
    s = read_summary(runs_root / "fails")
    assert (s["status"], s["cause"], s["error_type"], s["failed_rank"]) == (
        "failed",
        "raised",
        "ValueError",
        0,
    ), s
    assert s["message"] == "rank 0 raised ValueError at step 4: the loop failed at step 3", s
    assert "tracked_loop.py" in RunFolder(runs_root / "fails").traceback_file(0).read_text()


@pytest.mark.parametrize(
    "sig, status, words, code",
    [
        (signal.SIGTERM, "stopped", "stopped by signal SIGTERM", 143),
        (signal.SIGINT, "stopped", "stopped by Ctrl-C (SIGINT)", -signal.SIGINT),
        (signal.SIGKILL, "failed", "ended without a record after step", -signal.SIGKILL),
    ],
)
def test_a_stopped_or_killed_script_is_named_as_a_rank_would_be(runs_root, sig, status, words, code):
    run_dir = runs_root / signal.Signals(sig).name
    proc = start(run_dir, "--forever")
    try:
        wait_for_steps(run_dir, ranks=1, step=3)
        proc.send_signal(sig)
        assert proc.wait(60) == code
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)  # it prints its threads' stacks (faulthandler), then goes
        try:
            proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise AssertionError(f"still running 60 s after {sig!r}:\n{proc.communicate()[1][-6000:]}")
    s = read_summary(run_dir)
    assert s["status"] == status and words in s["message"], s
    if sig == signal.SIGKILL:
        assert s["cause"] == "vanished"  # no process of it is left to write anything
        assert "killed with SIGKILL" in s["message"] and "supervisor" not in s["message"]  # it has none
    else:
        assert s["returncode"] == code and s["steps"] >= 3


def test_the_time_budget_ends_a_loop_that_never_checks_it(runs_root):
    proc = start(runs_root / "budget", "--forever", env={"WORKBENCH_TIME_BUDGET_S": "0.5"})
    assert proc.wait(120) == 0, proc.stderr.read()
    s = read_summary(runs_root / "budget")
    assert (s["status"], s["ended_by"]) == ("completed", "time_budget"), s
    steps = [r for r in read_events(runs_root / "budget") if r["event"] == STEP]
    assert steps[-1].get(LAST) is True and not any(r.get(LAST) for r in steps[:-1])


def test_bad_input_is_one_line_before_anything_is_made(runs_root, monkeypatch):
    from workbench.tracking import track

    monkeypatch.setenv("WORKBENCH_TIME_BUDGET_S", "soon")
    with pytest.raises(
        ConfigError,
        match=r"WORKBENCH_TIME_BUDGET_S must be a number of seconds >= 0, "
        r"got 'soon'",
    ):
        track(run_dir=runs_root / "x")
    monkeypatch.delenv("WORKBENCH_TIME_BUDGET_S")
    with pytest.raises(
        ConfigError, match="config must be a dict, an argparse.Namespace, a dataclass or a RunConfig, got int"
    ):
        track(config=42, run_dir=runs_root / "x")
    taken = runs_root / "taken"
    taken.mkdir(parents=True)
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="is not empty"):
        track(run_dir=taken)
    assert not (runs_root / "x").exists() and sorted(p.name for p in taken.iterdir()) == ["notes.txt"]


@pytest.mark.slow
def test_torchrun_ranks_share_a_folder_and_the_rank_at_fault_is_named(runs_root, capsys):
    from workbench.cli import main as cli

    ok = start(runs_root / "ddp", "--steps", "8", torchrun=2)
    bad = start(runs_root / "ddp-fails", "--steps", "50", "--fail-at", "4", "--fail-rank", "1", torchrun=2)
    assert ok.wait(180) == 0, ok.stderr.read()
    assert bad.wait(180) != 0
    assert [p.name for p in RunFolder(runs_root / "ddp").events_files()] == ["rank0.jsonl", "rank1.jsonl"]
    assert read_summary(runs_root / "ddp")["world_size"] == 2
    # as the run ends, before any listing settles it: rank 1, whose own error it was, is named
    early = read_summary(runs_root / "ddp-fails")
    assert (early["status"], early.get("failed_rank")) == ("failed", 1), early
    assert cli(["runs"]) == 0  # settles the failed run: no process of it is left
    s = read_summary(runs_root / "ddp-fails")
    assert (s["status"], s.get("cause"), s.get("failed_rank")) == ("failed", "raised", 1), s
    assert s["message"].startswith("rank 1 raised ValueError at step 5"), s
    assert "ddp-fails" in capsys.readouterr().out


def test_ab_cmd_compares_two_commands_with_an_interval(runs_root, capsys):
    """An A/A test of one command run afresh each time: every run tracked, the verdict within
    noise, each side's figures, and the verdict kept in every run's record for its export."""
    from workbench.cli import main as cli

    command = f"{sys.executable} {LOOP} --forever"
    code = cli(["ab", "--cmd", command, "--budget-s", "0.4", "--rounds", "6", "--warmup-runs", "0", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    # a pair whose runs met different loads (the rest of the suite beside it) is dropped, as always
    assert out["speedup_pairs"] == 6 or out["speedup_pairs"] + out["speedup_dropped"] == 12
    assert out["speedup_verdict"] == "within noise", out["label"]
    if out["speedup_low"] is not None:
        assert out["speedup_low"] <= 1 <= out["speedup_high"]
    for side in ("A", "B"):
        figures = out["sides"][side]
        ran = out["speedup_pairs"] + out["speedup_dropped"]  # a dropped pair's runs count too
        assert figures["runs"] == ran and figures["samples_per_s"] > 0 and figures["peak_gib"] > 0
        lo, hi = figures["samples_per_s_interval"]
        assert lo <= figures["samples_per_s"] <= hi and figures["final_loss"] > 0
    tags = RunFolder(out["runs"]["B"][0]["run"]).script()["tags"]
    assert tags["ab_verdict"] == "within noise" and tags["ab_side"] == "B"
    from mlflow.tracking import MlflowClient  # the verdict travels with the run: MLflow's tags

    uri = f"sqlite:///{runs_root / 'ab.db'}"
    assert cli(["runs", "export", out["runs"]["B"][0]["run"], "--to", "mlflow", uri]) == 0
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("workbench").experiment_id])
    assert run.data.tags["ab_verdict"] == "within noise" and run.data.tags["ab_side"] == "B"


def test_ab_cmd_refuses_what_it_cannot_run_in_one_line(runs_root, capsys):
    from workbench.cli import main as cli

    assert cli(["ab", "--cmd", "python x.py", "--set", "run.steps=3"]) == 2
    assert capsys.readouterr().err.strip() == (
        "workbench ab: --set sets a config, and --cmd runs your own script: give the script's own "
        "flags inside --cmd and --vs-cmd instead"
    )
    assert cli(["ab", "--cmd", f"{sys.executable} -c pass", "--rounds", "6"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("workbench ab: A: `")
        and "without tracking a run: does it call workbench.track()?" in err
        and "\n" not in err
    )
    assert cli(["ab", "--cmd", "python x.py", "--vs-env", "1BAD=x"]) == 2
    assert "--vs-env '1BAD=x' is not KEY=VALUE" in capsys.readouterr().err


def test_ctrl_c_during_ab_cmd_ends_the_run_under_way_and_leaves_nothing(runs_root):
    """Ctrl-C during `ab --cmd`, in the middle of a long run: that run ends at once, uncounted, and
    the command ends with what it had (nothing yet), exit 130, no process left."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workbench",
            "ab",
            "--cmd",
            f"{sys.executable} {LOOP} --forever",
            "--budget-s",
            "600",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    trial = wait_for(lambda: next(iter(runs_root.glob("*_ab-cmd")), None), 120, "the trial folder")
    wait_for_steps(trial / "A-0", ranks=1, step=2)
    child = {r["pid"] for r in read_events(trial / "A-0") if r["event"] == "start"}
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "not measured" in out and "interrupted (SIGINT)" in err
    assert_all_gone(child, within=30)
    assert read_summary(trial / "A-0")["status"] == "stopped"


def test_a_script_that_spins_on_a_busy_machine_is_told_what_to_measure(monkeypatch):
    """The tracker chooses nothing, but says what the workbench's own thread rule would change,
    as an A/B to run, never as a fact."""
    from workbench.machine.threads import wait_advice

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    said = wait_advice(2, 1.4)
    assert "other programs held 1.4 cores while 2 threads waited by spinning" in said
    assert said.endswith("--vs-env OMP_WAIT_POLICY=PASSIVE")
    assert wait_advice(1, 1.4) is None and wait_advice(2, 0.1) is None  # one thread; quiet
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert wait_advice(2, 1.4) is None  # already what the rule would choose


def test_ab_cmd_ends_a_script_that_makes_no_step_and_says_so(runs_root, capsys, monkeypatch):
    """A script that tracks a run and then hangs before its loop is ended once the first step's
    allowance has passed (distributed.start_timeout_s; 3 s here), and the one line says it made no
    step, not that a signal killed it; a command that cannot start leaves no folder behind."""
    import workbench.trials.script_ab as script_ab
    from workbench.cli import main as cli

    monkeypatch.setattr(script_ab, "FIRST_STEP_S", 3.0)
    hangs = f"{sys.executable} -c 'import time, workbench; workbench.track(config={{}}); time.sleep(600)'"
    assert cli(["ab", "--cmd", hangs, "--rounds", "6", "--warmup-runs", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "made no step within 3 s of starting (distributed.start_timeout_s)" in err and "\n" not in err
    assert "SIGTERM" not in err
    before = sorted(runs_root.iterdir())
    assert cli(["ab", "--cmd", "/no/such/command --flag", "--rounds", "6"]) == 2
    assert "cannot start" in capsys.readouterr().err
    assert sorted(runs_root.iterdir()) == before  # the refused comparison made no folder
