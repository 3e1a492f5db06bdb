"""FSDP's sharded resumable state (run.save_every with distributed.strategy 'fsdp'): in one process,
what a save writes, that a partial save is never loaded and that a damaged state is one line naming
the file; with real torchrun ranks on the CPU, that a restarted attempt continues the interrupted
run's losses, and that a state saved on 2 ranks goes on training on 1 rank and back on 2."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from launch_helpers import faulty_model
from workbench.config import ConfigError, RunConfig
from workbench.distributed.launch import run, worker_command
from workbench.events import STEP, read_events
from workbench.runfolder import RunFolder
from workbench.train.sharded_resume import restore_sharded, save_sharded


# --- in one process: no process group, the model not sharded -------------------------------------
def _setup(seed: int, width: int = 6) -> SimpleNamespace:
    """What the save and the load read of a set-up run: model, AdamW with state, scaler, batches."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.ReLU(), torch.nn.Linear(width, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    parts = SimpleNamespace(model=model, opt=opt, scaler=torch.amp.GradScaler("cpu", enabled=False))
    return SimpleNamespace(parts=parts)


def _same(a: SimpleNamespace, b: SimpleNamespace) -> bool:
    pa, pb = a.parts.model.state_dict(), b.parts.model.state_dict()
    sa, sb = a.parts.opt.state_dict()["state"], b.parts.opt.state_dict()["state"]
    return (
        all(torch.equal(pa[k], pb[k]) for k in pa)
        and sa.keys() == sb.keys()
        and all(torch.equal(sa[i][k], sb[i][k]) for i in sa for k in sa[i])
    )


def test_a_saved_state_loads_whole_and_replaces_the_one_before(tmp_path):
    saved = _setup(0)
    save_sharded(saved, 2, tmp_path)
    save_sharded(saved, 4, tmp_path)
    folder = RunFolder(tmp_path)
    assert list(folder.sharded_steps()) == [4]  # the older one removed once the newer was whole
    assert not folder.sharded_partial_dir.exists()
    fresh = _setup(1)
    assert not _same(saved, fresh)
    assert restore_sharded(fresh, tmp_path) == 4
    assert _same(saved, fresh)  # parameters and every optimizer state, bit for bit
    assert restore_sharded(_setup(1), tmp_path / "elsewhere") == 0  # nothing saved: from step 0


def test_a_save_that_died_half_way_is_never_loaded(tmp_path):
    saved = _setup(0)
    save_sharded(saved, 2, tmp_path)
    folder = RunFolder(tmp_path)
    shutil.copytree(folder.sharded_step_dir(2), folder.sharded_partial_dir)
    for f in folder.sharded_partial_dir.iterdir():
        f.write_bytes(b"torn")  # what a rank killed mid-write leaves
    fresh = _setup(1)
    assert restore_sharded(fresh, tmp_path) == 2 and _same(saved, fresh)
    save_sharded(fresh, 4, tmp_path)  # the next save empties the partial folder first
    assert list(folder.sharded_steps()) == [4] and not folder.sharded_partial_dir.exists()


def _damage(path, how: str) -> None:
    shard = next(p for p in sorted(path.iterdir()) if p.suffix == ".distcp")
    index = path / ".metadata"
    if how == "no index":
        index.unlink()
    elif how == "index garbage":
        index.write_bytes(b"not an index")
    elif how == "shard missing":
        shard.unlink()
    elif how == "shard cut short":
        shard.write_bytes(shard.read_bytes()[:10])


@pytest.mark.parametrize(
    "how, message",
    [
        (
            "no index",
            r"has no index of its shards \('.*/step00000002/\.metadata' is missing\); the "
            r"folder is damaged",
        ),
        (
            "index garbage",
            r"the index of the resumable state '.*/step00000002' cannot be read \("
            r"UnpicklingError: .*\); the folder is damaged",
        ),
        (
            "shard missing",
            r"'.*/step00000002/__0_0\.distcp' is missing: the resumable state's index "
            r"names it; the folder is damaged",
        ),
        (
            "shard cut short",
            r"'.*/step00000002/__0_0\.distcp' holds 10 bytes, the resumable state's "
            r"index needs \d+; the folder is damaged \(cut short\)",
        ),
    ],
)
def test_a_damaged_state_is_one_line_naming_the_file(tmp_path, how, message):
    save_sharded(_setup(0), 2, tmp_path)
    _damage(RunFolder(tmp_path).sharded_step_dir(2), how)
    with pytest.raises(ConfigError, match=message) as e:
        restore_sharded(_setup(1), tmp_path)
    assert "\n" not in str(e.value)


def test_a_state_of_another_model_is_refused_in_one_line(tmp_path):
    save_sharded(_setup(0), 2, tmp_path)
    with pytest.raises(
        ConfigError,
        match=r"the resumable state '.*/step00000002' does not load "
        r"into this run's model and optimizer: ",
    ) as e:
        restore_sharded(_setup(1, width=7), tmp_path)
    assert "\n" not in str(e.value)


# --- real ranks ----------------------------------------------------------------------------------
def _cfg(smoke, tmp_path, nproc: int = 2, batch: int = 16, **kwargs):
    """A small MLP (the test model that can fail on a chosen rank and step), 8 steps, the state
    saved after step 4 (the last step is never saved: the run ends there)."""
    return smoke.replace(
        **{
            "distributed.nproc": nproc,
            "distributed.strategy": "fsdp",
            "model.name": faulty_model(tmp_path),
            "model.kwargs": kwargs,
            "run.steps": 8,
            "run.save_every": 4,
            "run.eval_batches": 0,
            "run.threads": 1,
            "loader.batch_size": batch,
        }
    )


def _losses(run_dir, rank: int | None = None, attempt: int | None = None) -> dict[int, float]:
    """Each step's loss on `rank`, or (None) the mean over the ranks: the loss of the whole batch
    when every rank's batch has the same size."""
    per_step: dict[int, list[float]] = {}
    for r in read_events(run_dir):
        if r["event"] == STEP and rank in (None, r["rank"]) and attempt in (None, r["attempt"]):
            per_step.setdefault(r["step"], []).append(r["loss"])
    return {step: sum(v) / len(v) for step, v in per_step.items()}


def _run_by_hand(cfg, run_dir, state_from) -> dict:
    """A new run on a folder that holds a saved state (a resubmitted job): its config written
    there and the worker's own command run, as a job file runs it."""
    folder = RunFolder(run_dir)
    shutil.copytree(RunFolder(state_from).sharded_resume_dir, folder.sharded_resume_dir)
    folder.write_config(cfg)
    done = subprocess.run(worker_command(cfg, run_dir), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder.summary()


@pytest.mark.slow
def test_a_restart_resumes_the_shards_on_the_same_trajectory(smoke, tmp_path):
    """Rank 1 raises at step 6; the restarted attempt loads every rank's shards saved after step 4
    and its losses are, bit for bit, those of a run that never failed."""
    clean = run(_cfg(smoke, tmp_path, mode="none"), timeout_s=300)
    cfg = _cfg(smoke, tmp_path, mode="raise", step=6, attempt=0)
    failed = run(cfg.replace(**{"distributed.max_restarts": 1}), timeout_s=300)
    assert clean["status"] == "completed", clean
    assert failed["status"] == "completed" and failed["attempts"] == 2, failed
    assert failed["resumed_from_step"] == 4 and failed["steps"] == 8
    records = read_events(failed["run_dir"])
    assert [r["from_step"] for r in records if r["event"] == "resumed"] == [4, 4]
    for rank in (0, 1):
        resumed = _losses(failed["run_dir"], rank, attempt=1)
        never_failed = {s: v for s, v in _losses(clean["run_dir"], rank).items() if s > 4}
        assert resumed.keys() == never_failed.keys() == {5, 6, 7, 8}
        assert resumed == never_failed  # the same shards, data and collectives: exactly equal
    saved = RunFolder(failed["run_dir"]).sharded_steps()
    assert list(saved) == [4]
    files = {p.name for p in saved[4].iterdir()}
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata"} <= files  # each rank wrote its own shards
    assert clean["param_sum"] == pytest.approx(failed["param_sum"], abs=1e-9)


@pytest.mark.slow
def test_a_state_saved_on_2_ranks_trains_on_1_rank_and_back_on_2(smoke, tmp_path):
    """2 ranks of 16 samples a batch save after step 4; a new 1-rank run of 32 a batch (the same
    samples a step: both shuffle with the run's seed and the 2 ranks take alternate samples) loads
    that state and trains steps 5-8, saving after step 6; a new 2-rank run loads that and trains
    steps 7-8. Each continues the uninterrupted 2-rank run's losses, within 1e-5 (a batch's mean
    and its gradient are summed in another order on 1 rank than across 2, so not bit for bit)."""
    two = run(_cfg(smoke, tmp_path, mode="none"), timeout_s=300)
    assert two["status"] == "completed", two
    one = _run_by_hand(
        _cfg(smoke, tmp_path, nproc=1, batch=32, mode="none").replace(**{"run.save_every": 2}),
        tmp_path / "one",
        two["run_dir"],
    )
    assert one["status"] == "completed" and one["resumed_from_step"] == 4, one
    whole_batch = _losses(two["run_dir"])
    on_one = _losses(tmp_path / "one")
    assert on_one.keys() == {5, 6, 7, 8}
    assert on_one == pytest.approx({s: v for s, v in whole_batch.items() if s > 4}, abs=1e-5)
    assert list(RunFolder(tmp_path / "one").sharded_steps()) == [6]
    back = _run_by_hand(_cfg(smoke, tmp_path, mode="none"), tmp_path / "back", tmp_path / "one")
    assert back["status"] == "completed" and back["resumed_from_step"] == 6, back
    for rank in (0, 1):
        again = _losses(tmp_path / "back", rank)
        never_moved = {s: v for s, v in _losses(two["run_dir"], rank).items() if s > 6}
        assert again.keys() == {7, 8}
        assert again == pytest.approx(never_moved, abs=1e-5)
    assert back["param_sum"] == pytest.approx(two["param_sum"], abs=1e-4)


def test_a_state_of_the_other_strategy_or_a_damaged_one_is_one_line(tmp_path):
    from workbench.train.resume import restore_state, save_state

    saved = _setup(0)
    save_sharded(saved, 2, tmp_path / "fsdp")
    with pytest.raises(ConfigError, match=r"saved with distributed.strategy=fsdp, and this run's is ddp"):
        restore_state(_setup(1), tmp_path / "fsdp", accum=1)
    (tmp_path / "ddp").mkdir()
    save_state(saved, 2, tmp_path / "ddp")
    with pytest.raises(
        ConfigError,
        match=r"resume.pt' is a resumable state saved with "
        r"distributed.strategy=ddp, and this run's is fsdp",
    ):
        restore_state(_setup(1), tmp_path / "ddp", accum=1, sharded=True)
    whole = RunFolder(tmp_path / "ddp").resume_file
    whole.write_bytes(whole.read_bytes()[:100])  # cut short, as a full disk or a copy might
    with pytest.raises(ConfigError, match=r"resume.pt' cannot be read \(.*\); the folder is damaged$"):
        restore_state(_setup(1), tmp_path / "ddp", accum=1)


@pytest.mark.parametrize("how", ["shard missing", "shard cut short", "no index", "other strategy"])
def test_a_damaged_sharded_state_is_refused_before_launch(tmp_path, how):
    from workbench.distributed.launch import launcher

    save_sharded(_setup(0), 2, tmp_path / "saved")
    strategy = "fsdp"
    if how == "other strategy":
        strategy = "ddp"
    else:
        _damage(RunFolder(tmp_path / "saved").sharded_step_dir(2), how)
    cfg = RunConfig.smoke().replace(
        **{
            "run.resume_from": str(tmp_path / "saved"),
            "distributed.nproc": 2,
            "run.oversubscribe": True,
            "distributed.strategy": strategy,
        }
    )
    with pytest.raises(ConfigError, match="damaged|saved with distributed.strategy=fsdp") as e:
        launcher().check(cfg, tmp_path / "runs")  # the launch's checks: nothing made or started
    assert "\n" not in str(e.value) and not (tmp_path / "runs").exists()


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A real run with a resumable state, made once; each case damages a copy of it."""
    import os
    import subprocess
    import sys

    runs = tmp_path_factory.mktemp("saved") / "runs"
    first = subprocess.run(
        [
            sys.executable,
            "-m",
            "workbench",
            "run",
            "--preset",
            "smoke",
            "--steps",
            "4",
            "--set",
            "run.save_every=2",
            "--set",
            "run.eval_batches=0",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "WORKBENCH_RUNS": str(runs)},
    )
    assert first.returncode == 0, first.stderr[-2000:]
    return Path(json.loads(first.stdout)["run_dir"])


@pytest.mark.parametrize("how", ["cut short", "garbage", "deleted"])
def test_a_damaged_whole_state_is_refused_in_one_line_without_a_new_folder(tmp_path, saved_run, how):
    import os
    import subprocess
    import sys

    runs = tmp_path / "runs"
    run_dir = runs / saved_run.name
    shutil.copytree(saved_run, run_dir)
    saved = RunFolder(run_dir).resume_file
    if how == "cut short":
        saved.write_bytes(saved.read_bytes()[: saved.stat().st_size // 2])
    elif how == "garbage":
        saved.write_bytes(b"\0" * 4096)
    else:
        saved.unlink()
    before = sorted(runs.iterdir())
    again = subprocess.run(
        [sys.executable, "-m", "workbench", "run", "--resume", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "WORKBENCH_RUNS": str(runs)},
    )
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1, again.stderr
    assert "resume" in again.stderr and "Traceback" not in again.stderr
    assert sorted(runs.iterdir()) == before  # no new run folder
