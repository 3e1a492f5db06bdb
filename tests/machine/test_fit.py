"""The one rule of what this machine can run (workbench.machine.fit) and the thread choice
(workbench.machine.threads), on faked machines: the launch, the stacking planner and the scaling
study give the same sentence, and the wait turns passive only when other programs hold cores;
then a lone run's warm-up tries its thread counts in turn and keeps the faster."""

from __future__ import annotations

import pytest
import torch

from workbench.config import ConfigError, RunConfig
from workbench.distributed.limits import check_cores
from workbench.machine.fit import cannot_run, max_ranks
from workbench.distributed.launch import run
from workbench.events import read_events
from workbench.machine.threads import ThreadChoice, choose_threads
from workbench.train.thread_trial import ThreadTrial
from workbench.stacking.plan import IF_ROOM, plan

CPU = torch.device("cpu")


@pytest.mark.parametrize("cores", [1, 2])
def test_the_planner_skips_with_the_launchs_own_sentence(fake_cores, cores):
    fake_cores(cores)
    steps = plan(RunConfig.smoke(), ["workers", "ddp"])
    for s in steps:
        assert cannot_run(s.config, CPU) is None  # what a study runs, the launch accepts
        said = s.reason or (s.note[len(IF_ROOM) :] if s.note.startswith(IF_ROOM) else None)
        if said:  # a skipped step keeps the config before it: the refused one adds its change
            with pytest.raises(ConfigError) as e:
                check_cores(s.config.replace(**s.change.settings))
            assert str(e.value) == said
    assert [s.reason is None for s in steps] == ([True, False, False] if cores == 1 else [True, True, True])
    # on 2 cores the DDP ranks fit the baseline but not beside the workers: they run if the workers
    # are not kept, and the plan says so in the launch's own sentence
    assert [s.note.startswith(IF_ROOM) for s in steps] == [False, False, cores == 2]
    assert max_ranks(RunConfig.smoke(), CPU) == cores


def test_oversubscribe_is_the_users_override(fake_cores):
    fake_cores(1)
    cfg = RunConfig.smoke().replace(**{"distributed.nproc": 2})
    assert "distributed.nproc=2 rank(s) x 1 thread(s)" in cannot_run(cfg, CPU)
    assert cannot_run(cfg.replace(**{"run.oversubscribe": True}), CPU) is None


@pytest.mark.parametrize(
    "other, policy", [(0.0, "default"), (0.2, "default"), (0.25, "passive"), (1.9, "passive")]
)
def test_the_wait_turns_passive_when_others_hold_cores(fake_cores, monkeypatch, other, policy):
    fake_cores(2)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    c = choose_threads(RunConfig.smoke(), other)
    assert (c.threads, c.wait_policy) == (2, policy)
    # passive: the machine is busy, so the warm-up also tries 1 thread; a comparison's runs do not
    trial = {"OMP_WAIT_POLICY": "PASSIVE", "WORKBENCH_THREAD_TRIAL": "2,1"}
    assert c.env() == (trial if policy == "passive" else {})
    assert c.fixed().env() == ({"OMP_WAIT_POLICY": "PASSIVE"} if policy == "passive" else {})
    assert ("tries them and 1 thread" in c.why) == (policy == "passive")
    assert "tries" not in c.fixed().why
    assert c.why.startswith(f"other processes held {other:.1f} of 2 cores: 2 thread(s) per rank")


def test_the_busy_processes_are_other_users_programs():
    """OtherWork's spinners stand for other users' programs: outside this process's tree (so the
    meter counts them as other work) and each in a session of its own (so the scheduler shares the
    cores between them and this session as between users, not thread by thread)."""
    import os

    import psutil

    from workbench.procs import OtherWork

    with OtherWork(2) as hogs:
        ours = {p.pid for p in psutil.Process().children(recursive=True)}
        assert [os.getsid(p.pid) for p in hogs.procs] == [p.pid for p in hogs.procs]
        assert os.getsid(0) not in {p.pid for p in hogs.procs} and not ours & {p.pid for p in hogs.procs}
        assert all(f"os.kill({os.getpid()}, 0)" in p.cmdline()[-1] for p in hogs.procs)


def test_the_busy_processes_end_when_their_owner_is_killed():
    """A benchmark killed by SIGKILL (or a SIGTERM it does not catch) runs no __exit__: its
    spinners see their owner gone and end by themselves."""
    import signal
    import subprocess
    import sys

    import psutil

    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from workbench.procs import OtherWork; import sys\n"
            "w = OtherWork(2).__enter__(); print(*[p.pid for p in w.procs], flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    spinners = [psutil.Process(int(pid)) for pid in owner.stdout.readline().split()]
    assert len(spinners) == 2 and all(p.is_running() for p in spinners)
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    _, alive = psutil.wait_procs(spinners, timeout=60)
    for p in alive:  # leave nothing behind even when the test fails
        p.kill()
    assert not alive


def test_the_users_threads_and_wait_policy_are_kept(fake_cores, monkeypatch):
    fake_cores(2)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    one = choose_threads(RunConfig.smoke().replace(**{"run.threads": 1}), 1.9)
    assert (one.threads, one.wait_policy) == (1, "default") and "(run.threads)" in one.why
    two_ranks = choose_threads(RunConfig.smoke().replace(**{"distributed.nproc": 2}), 1.9)
    assert two_ranks.threads == 1 and "shared by 2 rank(s)" in two_ranks.why
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    kept = choose_threads(RunConfig.smoke(), 1.9)
    assert kept.wait_policy == "default" and "OMP_WAIT_POLICY=ACTIVE from the environment, kept" in kept.why
    assert kept.env() == {}
    assert not one.trial and not two_ranks.trial and not kept.trial  # the user's, or ranks to agree
    monkeypatch.delenv("OMP_WAIT_POLICY")
    compiled = choose_threads(RunConfig.smoke().replace(**{"compile.enabled": True}), 1.9)
    assert compiled.wait_policy == "passive" and not compiled.trial  # each count would recompile


def test_a_trial_keeps_the_faster_count_leaving_each_counts_first_step_out(monkeypatch):
    monkeypatch.setenv("WORKBENCH_THREAD_TRIAL", "2,1")
    before = torch.get_num_threads()
    try:
        trial = ThreadTrial.from_env(9)  # 8 steps: as many for each count, 3 timed
        assert trial.steps == 8
        # 1 thread's first step is its slowest: counted, it would lose
        times = [0.001, 0.100, 0.005, 0.004, 0.006, 0.003, 0.005, 0.004]
        for i, seconds in enumerate(times, 1):
            assert trial.before(i) == (2, 1)[(i - 1) % 2] == torch.get_num_threads()
            record = trial.after(i, seconds)
            assert (record is None) == (i < 8)
        assert record["kept"] == trial.kept == torch.get_num_threads() == 1
        assert record["median_step_ms"] == {"2": 5.0, "1": 4.0} and record["timed_steps_each"] == 3
        assert record["why"] == (
            "the warm-up tried 2 and 1 thread(s) in turn, 3 timed steps each: "
            "median 5 ms and 4 ms a step; kept 1"
        )
        assert trial.before(9) is None and trial.after(9, 1.0) is None  # past the trial
        assert trial.unfinished() is None  # it chose
        short = ThreadTrial.from_env(7)  # 3 steps each: 2 timed, too few to choose on
        assert short.steps == 0 and short.before(1) is None
        assert short.unfinished() == {
            "kept": 2,
            "why": "the warm-up's 7 step(s) were too short to "
            "time each of 2 and 1 thread(s) on 3 steps after its first: "
            "no trial; kept 2",
        }
        assert torch.get_num_threads() == 2
        ended = ThreadTrial.from_env(8)
        ended.before(1)
        ended.after(1, 0.01)
        ended.before(2)  # a time budget ends the run on this step, at 1 thread
        assert ended.unfinished()["why"] == (
            "the run ended inside the warm-up's thread trial, before it chose; kept 2"
        )
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    monkeypatch.setenv("WORKBENCH_THREAD_TRIAL", "2")
    assert ThreadTrial.from_env(10) is None  # nothing to choose between


@pytest.mark.timeout(300)
def test_a_run_asked_for_a_trial_runs_its_warm_up_at_each_count_and_keeps_one(smoke, fake_cores):
    fake_cores(2)
    choice = ThreadChoice(2, "passive", "a test's choice", 1.9, trial=(2, 1))
    summary = run(smoke.replace(**{"run.eval_batches": 0, "run.steps": 40}), threads=choice)
    assert summary["status"] == "completed", summary
    steps = [r for r in read_events(summary["run_dir"]) if r["event"] == "step"]
    assert [r.get("threads") for r in steps[:9]] == [2, 1] * 4 + [None]  # the 8 warm-up steps
    trial = summary["thread_trial"]
    assert summary["threads"] == trial["kept"] in (1, 2) and summary["wait_policy"] == "passive"
    assert summary["threads_why"] == f"a test's choice; {trial['why']}"
