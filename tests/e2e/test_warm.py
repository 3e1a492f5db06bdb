"""The warm worker: a spare, pre-imported run that takes the next run which fits it. It must be
invisible in the results, owned like every other process, used once, and never touch CUDA."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

from workbench.config import RunConfig
from workbench.distributed import warm
from workbench.distributed.launch import launcher, run, start_run
from workbench.events import read_events
from workbench.machine.threads import WAIT_ENV, ThreadChoice
from workbench.procs import OtherWork

from launch_helpers import alive, assert_all_gone, wait_for


def losses(run_dir) -> list[float]:
    return [r["loss"] for r in read_events(run_dir) if r.get("event") == "step" and r["rank"] == 0]


def start_record(run_dir, rank=0) -> dict:
    return next(r for r in read_events(run_dir) if r.get("event") == "start" and r["rank"] == rank)


def launch_record(run_dir) -> dict:
    return json.loads((run_dir / "launch.json").read_text())


def ready_spare(cfg) -> warm.Spare:
    spares = launcher().spares
    spares.keep_warm(cfg)
    return wait_for(
        lambda: spares.spare and spares.spare.ready() and spares.spare, 120, "the spare to warm up"
    )


def cfg_for(nproc: int) -> RunConfig:
    return RunConfig.smoke().replace(
        **{"run.steps": 8, "run.threads": 1, "run.eval_batches": 0, "distributed.nproc": nproc}
    )


@pytest.mark.parametrize("nproc", [1, 2])
def test_a_warm_run_gives_the_cold_runs_losses_and_events(nproc):
    cfg = cfg_for(nproc)
    cold = run(cfg.replace(**{"run.warm_worker": False}), timeout_s=180)
    spare = ready_spare(cfg)
    handle = start_run(cfg)
    assert handle.proc.pid == spare.proc.pid  # the spare took it
    handle.wait(180)
    hot = handle.summary()
    assert cold["status"] == hot["status"] == "completed", (cold, hot)
    assert losses(handle.run_dir) == losses(cold["run_dir"]) and len(losses(handle.run_dir)) == 8
    assert hot["final_loss"] == cold["final_loss"]

    def kinds(d):  # each rank's order
        return sorted(
            ((r["rank"], r["event"]) for r in read_events(d) if r["event"] != "heartbeat"), key=lambda k: k[0]
        )

    assert kinds(handle.run_dir) == kinds(cold["run_dir"])
    for rank in range(nproc):
        record = start_record(handle.run_dir, rank)["warm"]
        assert record["cuda_initialized_before_job"] is False and record["warm_up_s"] > 0
    launch = launch_record(handle.run_dir)
    assert launch["warm"]["spare_pid"] == spare.proc.pid and launch["warm"]["ready_when_taken"]
    assert launch["command"] == handle.command == spare.command  # what ran: the spare's command
    assert "--warm" in handle.command
    if nproc > 1:  # torchrun stayed the engine, and its logs are where a cold run keeps them
        assert (handle.run_dir / "torchrun_logs").is_dir()
    assert not spare.folder.exists()


def test_each_spare_takes_one_run_and_every_run_gets_a_new_process():
    cfg = cfg_for(1)
    ready_spare(cfg)
    pids, spares = [], []
    for _ in range(2):
        handle = start_run(cfg)
        spares.append(launch_record(handle.run_dir).get("warm", {}).get("spare_pid"))
        handle.wait(180)
        pids.append(start_record(handle.run_dir)["pid"])
        assert not alive({pids[-1], handle.proc.pid})  # the process that ran it is gone
    assert spares[0] is not None and spares[1] is not None  # the second run took the replacement
    assert len(set(pids)) == 2 and len(set(spares)) == 2


def test_a_spare_that_does_not_fit_is_ended_and_the_run_starts_cold():
    spare = ready_spare(cfg_for(1))
    handle = start_run(cfg_for(1).replace(**{"model.width": 24, "distributed.nproc": 2}))
    assert handle.proc.pid != spare.proc.pid and "warm" not in launch_record(handle.run_dir)
    assert "distributed.nproc" in launch_record(handle.run_dir)["cold_because"]
    assert_all_gone({spare.proc.pid}, within=30)
    assert handle.wait(180) == 0


def test_warm_worker_false_starts_cold_and_leaves_the_ready_spare_to_the_next_run():
    spare = ready_spare(cfg_for(1))
    handle = start_run(cfg_for(1).replace(**{"run.warm_worker": False}))
    assert handle.proc.pid != spare.proc.pid
    assert launch_record(handle.run_dir)["cold_because"] == "run.warm_worker is false"
    assert handle.wait(180) == 0 and "warm" not in start_record(handle.run_dir)
    after = start_run(cfg_for(1))  # the panel's next run: the spare waited, asleep, and takes it
    assert after.proc.pid == spare.proc.pid and after.wait(180) == 0


def test_a_busy_launchs_thread_trial_goes_to_the_spare_with_its_job(monkeypatch):
    # The spare warmed up without a trial; the run asks for one at its launch: the trial is no
    # part of the fit (a rank reads it only after its job), so the spare takes the run and runs it.
    monkeypatch.setenv(WAIT_ENV, "PASSIVE")  # the wait policy, fixed at torch's import, is shared
    cfg = cfg_for(1).replace(**{"run.steps": 60})
    spare = ready_spare(cfg)
    busy = ThreadChoice(2, "passive", "as a busy launch chooses", 1.5, (2, 1))
    handle = start_run(cfg, threads=busy)
    assert handle.proc.pid == spare.proc.pid
    handle.wait(180)
    trial = handle.summary()["thread_trial"]
    assert set(trial["median_step_ms"]) == {"2", "1"} and trial["kept"] in (1, 2), trial


def test_a_spare_takes_the_run_beside_other_work():
    # The wait policy a busy launch chooses is fixed when a rank imports torch: the waiting spare
    # is restarted with the policy the machine's load calls for, so the busy run still fits it.
    cfg = cfg_for(1).replace(**{"run.threads": 0})
    launcher().spares.keep_warm(cfg)
    with OtherWork(2):
        spare = wait_for(
            lambda: (s := launcher().spares.spare) and s.wait_policy == "passive" and s.ready() and s,
            180,
            "a spare with the passive wait",
        )
        handle = start_run(cfg)
        assert handle.proc.pid == spare.proc.pid
        assert launch_record(handle.run_dir)["threads"]["wait_policy"] == "passive"
        assert handle.wait(180) == 0


def test_stop_ends_a_warm_run_like_a_cold_one():
    cfg = cfg_for(1).replace(**{"run.steps": 100000})
    spare = ready_spare(cfg)
    handle = start_run(cfg)
    wait_for(lambda: losses(handle.run_dir), 120, "the first step")
    handle.stop()
    assert handle.summary()["status"] == "stopped"
    assert_all_gone({spare.proc.pid, start_record(handle.run_dir)["pid"]}, within=30)


KERNEL = textwrap.dedent("""
    import json, sys, time
    from workbench.config import RunConfig
    from workbench.distributed.launch import launcher
    cfg = RunConfig.smoke().replace(**{"distributed.nproc": int(sys.argv[1])})
    spares = launcher().spares
    spares.keep_warm(cfg)
    while not (spares.spare and spares.spare.ready()):
        time.sleep(0.05)
    print(json.dumps({"spare": spares.spare.proc.pid, "folder": str(spares.spare.folder),
                      "check": spares.check.pid}), flush=True)
    time.sleep(3600)
""")


@pytest.mark.parametrize("nproc", [1, 2])
def test_spares_are_gone_after_the_kernel_dies(nproc):
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL, str(nproc)], stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(kernel.stdout.readline())
        tree = {
            info["spare"],
            info["check"],
            *(p.pid for p in psutil.Process(info["spare"]).children(recursive=True)),
        }
        assert len(tree) >= 3 + (nproc > 1)  # supervisor, worker(s) (and torchrun's agent), check
        kernel.send_signal(signal.SIGKILL)
        kernel.wait(30)
        assert_all_gone(tree, within=30)
        assert not os.path.exists(info["folder"])
    finally:
        kernel.kill()


def test_warm_up_never_initialises_cuda():
    # A GPU run initialises its device itself after taking the job; the warm-up must not, or a
    # run would start in a process with a CUDA context made before it (the fork-after-CUDA trap).
    code = (
        "import torch\n"
        "def refuse(*a, **k): raise AssertionError('warm-up initialised CUDA')\n"
        "torch.cuda._lazy_init = refuse\n"
        "from workbench.train.spare_rank import warm_up\n"
        "warm_up()\n"
        "assert not torch.cuda.is_initialized()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
