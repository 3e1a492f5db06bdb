"""The resumable state (run.save_every), one format under every strategy: in one process, what a
save writes, that a partial save is never loaded and that a damaged state is one line naming the
file; with real torchrun ranks on the CPU, that a restarted FSDP attempt continues the interrupted
run's losses, and that a state saved under DDP on 2 ranks goes on under FSDP and then in one
process, step by step on the unbroken run's losses."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from launch_helpers import faulty_model
from workbench.config import ConfigError, RunConfig
from workbench.distributed.launch import run, worker_command
from workbench.events import STEP, read_events
from workbench.runfolder import SAVING, STATE_INDEX, RunFolder
from workbench.train.resume import load_state, restore_state, save_state


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


def save_in(s: SimpleNamespace, step: int, run_dir) -> None:
    save_state(s.parts, step, RunFolder(run_dir).resume_dir)


def load_from(s: SimpleNamespace, run_dir) -> int:
    return load_state(s.parts, RunFolder(run_dir).resume_dir)


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
    save_in(saved, 2, tmp_path)
    save_in(saved, 4, tmp_path)
    folder = RunFolder(tmp_path)
    assert list(folder.saved_steps()) == [4]  # the older one removed once the newer was whole
    assert not (folder.resume_dir / SAVING).exists()
    fresh = _setup(1)
    assert not _same(saved, fresh)
    assert load_from(fresh, tmp_path) == 4
    assert _same(saved, fresh)  # parameters and every optimizer state, bit for bit
    assert load_from(_setup(1), tmp_path / "elsewhere") == 0  # nothing saved: from step 0


def test_a_save_that_died_half_way_is_never_loaded(tmp_path):
    saved = _setup(0)
    save_in(saved, 2, tmp_path)
    folder = RunFolder(tmp_path)
    shutil.copytree(folder.saved_steps()[2], (folder.resume_dir / SAVING))
    for f in (folder.resume_dir / SAVING).iterdir():
        f.write_bytes(b"torn")  # what a rank killed mid-write leaves
    fresh = _setup(1)
    assert load_from(fresh, tmp_path) == 2 and _same(saved, fresh)
    save_in(fresh, 4, tmp_path)  # the next save empties the partial folder first
    assert list(folder.saved_steps()) == [4] and not (folder.resume_dir / SAVING).exists()


def _damage(path, how: str) -> None:
    shard = next(p for p in sorted(path.iterdir()) if p.suffix == ".distcp")
    metadata = path / ".metadata"
    if how.startswith("without the workbench's index: "):  # as the exported script's state is
        (path / STATE_INDEX).unlink()
        how = how.split(": ", 1)[1]
    if how == "no metadata":
        metadata.unlink()
    elif how == "metadata garbage":
        metadata.write_bytes(b"not an index")
    elif how == "shard missing":
        shard.unlink()
    elif how == "shard cut short":
        shard.write_bytes(shard.read_bytes()[:10])
    elif how == "shard altered":  # the same length, other bytes: only the checksum sees it
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    elif how == "workbench index garbage":
        (path / STATE_INDEX).write_text("{not json")


@pytest.mark.parametrize(
    "how, message",
    [
        (
            "no metadata",
            r"'.*/step00000002/\.metadata' is missing: the resumable state's index names it; the "
            r"folder is damaged",
        ),
        (
            "shard missing",
            r"'.*/step00000002/__0_0\.distcp' is missing: the resumable state's index "
            r"names it; the folder is damaged",
        ),
        (
            "shard cut short",
            r"'.*/step00000002/__0_0\.distcp' holds 10 bytes, the resumable state's "
            r"index says \d+; the folder is damaged \(cut short\)",
        ),
        (
            "shard altered",
            r"'.*/step00000002/__0_0\.distcp' does not hold what was saved \(its SHA-256 differs "
            r"from the resumable state's index\); the folder is damaged",
        ),
        (
            "workbench index garbage",
            r"the index of the resumable state '.*/step00000002/workbench-index\.json' cannot be "
            r"read \(JSONDecodeError\); the folder is damaged",
        ),
        (
            "without the workbench's index: no metadata",
            r"has no index of its parts \('.*/step00000002/\.metadata' is missing\); the "
            r"folder is damaged",
        ),
        (
            "without the workbench's index: metadata garbage",
            r"the index of the resumable state '.*/step00000002' cannot be read \("
            r"UnpicklingError: .*\); the folder is damaged",
        ),
        (
            "without the workbench's index: shard missing",
            r"'.*/step00000002/__0_0\.distcp' is missing: the resumable state's index "
            r"names it; the folder is damaged",
        ),
        (
            "without the workbench's index: shard cut short",
            r"'.*/step00000002/__0_0\.distcp' holds 10 bytes, the resumable state's "
            r"index needs \d+; the folder is damaged \(cut short\)",
        ),
    ],
)
def test_a_damaged_state_is_one_line_naming_the_file(tmp_path, how, message):
    save_in(_setup(0), 2, tmp_path)
    _damage(RunFolder(tmp_path).saved_steps()[2], how)
    with pytest.raises(ConfigError, match=message) as e:
        load_from(_setup(1), tmp_path)
    assert "\n" not in str(e.value)


def test_the_damage_check_before_launch_reads_no_torch(tmp_path):
    """The CLI and the launcher tell a damaged state from the workbench's index alone: a fresh
    interpreter that checks it imports no torch (which takes seconds on a busy machine)."""
    save_in(_setup(0), 2, tmp_path)
    _damage(RunFolder(tmp_path).saved_steps()[2], "shard cut short")
    probe = (
        "import sys\n"
        "from workbench.config import ConfigError\n"
        "from workbench.train.state_index import check_saved_state\n"
        "try:\n"
        f"    check_saved_state({str(tmp_path)!r})\n"
        "except ConfigError as e:\n"
        "    print(e)\n"
        "print('torch imported' if 'torch' in sys.modules else 'no torch')\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "holds 10 bytes" in out and out.strip().endswith("no torch"), out


def test_a_state_of_another_model_is_refused_in_one_line(tmp_path):
    save_in(_setup(0), 2, tmp_path)
    with pytest.raises(
        ConfigError,
        match=r"the resumable state '.*/step00000002' does not load "
        r"into this run's model and optimizer: ",
    ) as e:
        load_from(_setup(1, width=7), tmp_path)
    assert "\n" not in str(e.value)


# --- real ranks ----------------------------------------------------------------------------------
def _cfg(smoke, tmp_path, nproc: int = 2, batch: int = 16, strategy: str = "fsdp", **kwargs):
    """A small MLP (the test model that can fail on a chosen rank and step), 8 steps, the state
    saved after step 4 and after the last."""
    return smoke.replace(
        **{
            "distributed.nproc": nproc,
            "distributed.strategy": strategy,
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
    shutil.copytree(RunFolder(state_from).resume_dir, folder.resume_dir)
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
    saved = RunFolder(failed["run_dir"]).saved_steps()
    assert list(saved) == [8]  # the last step's, kept so that the run can be extended
    files = {p.name for p in saved[8].iterdir()}
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata"} <= files  # each rank wrote its own shards
    assert clean["param_sum"] == pytest.approx(failed["param_sum"], abs=1e-9)


@pytest.mark.slow
def test_a_ddp_state_goes_on_under_fsdp_and_then_in_one_process(smoke, tmp_path):
    """One format under every strategy, and a finished run extended: 2 DDP ranks of 16 samples a
    batch run 4 steps and keep their last step's state; a new 2-rank FSDP run loads that state and
    trains steps 5-6, keeping step 6's; a new 1-process run
    of 32 a batch (the same samples a step: both shuffle with the run's seed and the 2 ranks take
    alternate samples) loads that and trains steps 7-8. Each continues the unbroken DDP run's
    losses step by step, within 1e-5 (a batch's mean and its gradient are summed in another order
    by FSDP's reduce-scatter, and on 1 rank than across 2, so not bit for bit)."""
    ddp = run(_cfg(smoke, tmp_path, strategy="ddp", mode="none"), timeout_s=300)
    assert ddp["status"] == "completed", ddp
    whole_batch = _losses(ddp["run_dir"])
    first_half = run(_cfg(smoke, tmp_path, strategy="ddp", mode="none").replace(**{"run.steps": 4}))
    assert list(RunFolder(first_half["run_dir"]).saved_steps()) == [4]  # its last step's state
    fsdp = _run_by_hand(
        _cfg(smoke, tmp_path, mode="none").replace(**{"run.steps": 6}),
        tmp_path / "fsdp",
        first_half["run_dir"],
    )
    assert fsdp["status"] == "completed" and fsdp["resumed_from_step"] == 4, fsdp
    for rank in (0, 1):
        under_fsdp = _losses(tmp_path / "fsdp", rank)
        assert under_fsdp.keys() == {5, 6}
        assert under_fsdp == pytest.approx(
            {s: v for s, v in _losses(ddp["run_dir"], rank).items() if 4 < s <= 6}, abs=1e-5
        )
    assert list(RunFolder(tmp_path / "fsdp").saved_steps()) == [6]
    one = _run_by_hand(
        _cfg(smoke, tmp_path, nproc=1, batch=32, mode="none"), tmp_path / "one", tmp_path / "fsdp"
    )
    assert one["status"] == "completed" and one["resumed_from_step"] == 6, one
    on_one = _losses(tmp_path / "one")
    assert on_one.keys() == {7, 8}
    assert on_one == pytest.approx({s: v for s, v in whole_batch.items() if s > 6}, abs=1e-5)
    assert one["param_sum"] == pytest.approx(ddp["param_sum"], abs=1e-4)


def test_an_earlier_versions_state_or_a_damaged_one_is_one_line(tmp_path):
    (tmp_path / "earlier").mkdir()
    (tmp_path / "earlier" / "resume.pt").write_bytes(b"what an earlier version wrote")
    with pytest.raises(
        ConfigError, match=r"resume.pt' is a resumable state in the format of an earlier version"
    ):
        restore_state(_setup(1), tmp_path / "earlier", accum=1)
    save_in(_setup(0), 2, tmp_path / "saved")
    shard = next(RunFolder(tmp_path / "saved").saved_steps()[2].glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])  # cut short, as a full disk or a copy might
    with pytest.raises(ConfigError, match=r"distcp' holds 100 bytes, .*the folder is damaged \(cut short\)$"):
        restore_state(_setup(1), tmp_path / "saved", accum=1)


@pytest.mark.parametrize(
    "how",
    [
        "shard missing",
        "shard cut short",
        "shard altered",
        "without the workbench's index: no metadata",
        "earlier version",
    ],
)
def test_a_damaged_state_is_refused_before_launch(tmp_path, how):
    from workbench.distributed.launch import launcher

    if how == "earlier version":
        (tmp_path / "saved").mkdir()
        (tmp_path / "saved" / "resume_sharded").mkdir()
    else:
        save_in(_setup(0), 2, tmp_path / "saved")
        _damage(RunFolder(tmp_path / "saved").saved_steps()[2], how)
    cfg = RunConfig.smoke().replace(
        **{
            "run.resume_from": str(tmp_path / "saved"),
            "distributed.nproc": 2,
            "run.oversubscribe": True,
            "distributed.strategy": "fsdp",
        }
    )
    with pytest.raises(ConfigError, match="damaged|the format of an earlier version") as e:
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
def test_a_damaged_saved_state_is_refused_in_one_line_without_a_new_folder(tmp_path, saved_run, how):
    import os
    import subprocess
    import sys

    runs = tmp_path / "runs"
    run_dir = runs / saved_run.name
    shutil.copytree(saved_run, run_dir)
    steps = RunFolder(run_dir).saved_steps()
    saved = next(steps[max(steps)].glob("*.distcp"))
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
