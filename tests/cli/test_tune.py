"""`workbench tune` end to end with real runs, sized to a test: the report names every setting of
the catalog with what became of it, the recommended config is a valid config, and the export of
it is written; the memory plan's batches and checkpointing follow the pre-launch prediction; a
compile is done once, untimed, and a compiled run's budget leaves its compile out; a larger batch's
loss is compared over the same samples seen. (The search's calibration is tests/tune/test_search.py,
on a simulated device.)"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys

from workbench.config import RunConfig
from workbench.tune.candidates import CATALOG, NOT_TRIED


def test_a_short_tune_reports_every_setting_and_exports_what_it_recommends(tmp_path, runs_root):
    out = tmp_path / "tuned"
    cmd = [
        sys.executable,
        "-m",
        "workbench",
        "tune",
        "--preset",
        "smoke",
        "--budget-min",
        "0.25",
        "--bound-by",
        "data",
        "--json",
        "--out",
        str(out),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    decisions = {d["setting"]: d for d in report["decisions"]}
    # every setting, tried or not, with a reason; the memory ones planned from the pre-launch check
    assert set(decisions) == {c.key for c in CATALOG} | {"batch", "checkpointing"}
    assert report["bound_by"] == "data" and report["not_tried"] == NOT_TRIED
    assert report["memory_budget_gib"] > 0 and "the RAM available" in report["memory_note"]
    assert decisions["checkpointing"]["outcome"].startswith("not measured: this model has no blocks")
    assert decisions["checkpointing"]["status"] == "not measured"
    first = report["decisions"][0]
    assert first["setting"] == "workers" and first["why"].startswith("bound by data: loader first")
    assert first["settings"]["loader.num_workers"] == 2  # what each row set, beside its name
    assert decisions["batch"]["settings"]["loader.batch_size"] > RunConfig.smoke().loader.batch_size
    # measured: pairs of slices in warm processes (busy pairs count; a pair whose load changed is
    # dropped and repeated)
    assert first["rounds"] + first["dropped_pairs"] >= 1 and first["outcome"], first
    if first["rounds"]:
        assert first["status"] in ("kept", "dropped", "undecided") and first["conditions"]
    else:  # the load of other programs changed inside every pair it had time for: said, not hidden
        assert first["status"] == "not measured" and "dropped" in first["outcome"], first
    assert decisions["channels_last"]["outcome"].startswith(
        "not measured: this machine cannot run it: channels_last"
    )
    assert not any("drop" in d["status"] for d in report["decisions"] if not d["rounds"])
    # the precision lesson of this model: why bf16 pays or not, from its matmuls on this machine's curve
    if "cannot run it" not in decisions["bf16"]["outcome"]:
        why = report["precision_why"]["bf16"]  # worded by where bf16 pays on this CPU's curve
        assert re.search(r"this model's \d+ matmuls", why), report["precision_why"]
    assert all(d["outcome"] for d in report["decisions"])
    tuned = RunConfig.from_dict(report["config"])  # a valid config: the baseline + what was kept
    smoke = RunConfig.smoke()
    assert tuned == (smoke.replace(**report["settings"]) if report["settings"] else smoke)
    assert (out / "train.py").is_file() and report["export"]["files"]
    assert report["spent_s"] <= 15 + 60  # the budget, and at most one round more
    bad = subprocess.run(cmd[:4] + ["--memory-budget", "0"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().endswith("--memory-budget must be > 0 GiB, got 0.0")
    # --set, as every command that builds a config has it: applied to the baseline, checked at once
    bad = subprocess.run(
        cmd[:4] + ["--set", "loader.batch_size=0"], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and bad.stderr.strip().endswith("loader.batch_size must be >= 1, got 0")


def test_the_panel_refuses_a_bad_budget_and_draws_each_decision(tmp_path):
    import pytest

    from workbench.config import ConfigError
    from workbench.tune.search import Decision
    from workbench.ui.tune_panel import TunePanel

    panel = TunePanel(RunConfig.smoke(), budget_min=0)
    assert panel.run() is None and not panel.job.running  # refused before any run
    assert "must be &gt; 0" in panel.status.value
    panel._decided(
        Decision(
            "bf16", True, "bound by compute: precision first", "faster by more than 5%", 1.3, 1.2, 1.4, 8, 2
        )
    )
    row = html.unescape(panel.table.value).replace("\xa0", " ")  # the text a reader sees
    assert all(s in row for s in ("bf16", "kept", "1.30x [1.20, 1.40]", "faster by more than 5%"))
    with pytest.raises(ConfigError, match="nothing to export yet"):
        panel.export(tmp_path)


def _tiny_lm():
    return (
        RunConfig.smoke()
        .with_model("transformer")
        .replace(**{"model.width": 64, "model.depth": 2, "run.threads": 1})
    )


def test_the_memory_plan_takes_the_largest_power_of_two_that_the_prediction_fits():
    import pytest

    from workbench.config import ConfigError
    from workbench.distributed.launch import launcher
    from workbench.distributed.limits import per_rank_gib
    from workbench.tune.memory_candidates import plan_memory

    lm = _tiny_lm()
    plain = per_rank_gib(lm, launcher().precheck(lm), "cpu")  # torch's own share varies by machine
    budget = round(plain + 0.06, 3)  # room for a few times the baseline's activations
    plan = plan_memory(lm, budget)
    (batch, r0), (ckpt, r1) = plan.options
    assert r0 is None and r1 is None, plan
    assert plan.note.startswith(f"memory budget {budget:.3g} GiB a rank (given)")
    b0, b1 = batch.settings["loader.batch_size"], ckpt.settings["loader.batch_size"]
    assert ckpt.settings["train.checkpoint"] == ["blocks.layers.0", "blocks.layers.1"] and b1 > b0
    for cfg in (lm, lm.replace(**{"train.checkpoint": ckpt.settings["train.checkpoint"]})):
        need = launcher().precheck(cfg)
        largest = b0 if not cfg.train.checkpoint else b1
        fits = lambda b: per_rank_gib(cfg.replace(**{"loader.batch_size": b}), need, "cpu")  # noqa: E731
        assert fits(largest) <= budget < fits(2 * largest)
    # a budget only checkpointing meets: it is needed, at the baseline's batch
    ckpt_cfg = lm.replace(**{"train.checkpoint": ckpt.settings["train.checkpoint"]})
    less = per_rank_gib(ckpt_cfg, launcher().precheck(ckpt_cfg), "cpu")
    (needed, _), _ = plan_memory(lm, (plain + less) / 2).options
    assert needed.needed.startswith("the baseline needs") and "loader.batch_size" not in needed.settings
    with pytest.raises(ConfigError, match=r"over the 0\.01 GiB memory budget \(given\); use a larger"):
        plan_memory(lm, 0.01)


def test_a_compile_is_done_once_untimed_and_a_larger_batch_is_checked_against_samples_seen(tmp_path):
    from workbench.tune.tuner import TrialMeasure

    ran = []
    m = TrialMeasure(
        RunConfig.smoke().replace(**{"run.threads": 1}), on_slice=ran.append, folder=tmp_path / "trial"
    )
    try:
        trial = {"compile.enabled": True, "loader.batch_size": 128}  # one round for both rules
        assert m.one_off({}, trial) == "compiling" and m.one_off({}, {}) is None
        p = m.prepare({}, trial, 300)
        assert p.failed is None and p.seconds > 0 and m.one_off({}, trial) is None
        assert not ran  # building compiled it, outside every slice
        for _ in range(3):
            r = m.round({}, trial)
            assert r.failed is None and (r.dropped or r.ratio > 0)
        assert {s.label for s in ran} == {"baseline", "compile.enabled=True,loader.batch_size=128"}
        assert all(s.steps >= 1 and s.wall_s > 0 for s in ran)
        check = m.loss_check({}, trial)
        assert "samples seen (batch 128 against 32 a step)" in check.note, check.note
        assert (tmp_path / "trial" / "slices.jsonl").read_text().count("\n") == len(ran)
    finally:
        m.close()


def test_without_a_compiler_the_compile_row_says_the_fit_rule_s_sentence(monkeypatch):
    import torch

    from workbench.machine import fit
    from workbench.tune.candidates import reachable

    monkeypatch.setattr(fit.shutil, "which", lambda name: None)
    reasons = {c.key: r for c, r in reachable(RunConfig.smoke().replace(**{"run.device": "cpu"}))}
    sentence = fit.cannot_run(RunConfig.smoke().replace(**{"compile.enabled": True}), torch.device("cpu"))
    assert reasons["compile"] == sentence and "needs a C++ compiler" in sentence


def test_channels_last_is_tried_only_on_a_model_with_4d_weights():
    """The pre-launch check says whether the model has 4-D weights, read from its parameters
    (built on the meta device): a user's transformer is not given channels_last rounds."""
    from workbench.distributed.launch import launcher
    from workbench.tune.candidates import reachable

    cnn = RunConfig.smoke().with_model("examples/resnet.py:build")
    flat = RunConfig.smoke().replace(**{"model.name": "examples/gpt.py:build", "data.name": "text"})
    for cfg, has in ((cnn, True), (flat, False)):
        weights = launcher().precheck(cfg)["image_weights"]
        assert weights is has, cfg.model.name
        layout = [r for c, r in reachable(cfg, weights) if c.kind == "layout"][0]
        assert (layout is None) is has, layout
        if not has:
            assert layout.startswith("channels_last only changes image (4-D) tensors")


def _interrupted(cmd: list[str], root) -> tuple[subprocess.CompletedProcess, set[int]]:
    """Run a command until its trial has timed slices, press Ctrl-C once, and return how it ended
    with every process it had started."""
    import os
    import signal

    import psutil
    from launch_helpers import wait_for

    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "WORKBENCH_RUNS": str(root)},
    )
    try:
        wait_for(
            lambda: [f for f in root.glob("trials/*/slices.jsonl") if len(f.read_text().splitlines()) >= 4],
            300,
            "timed slices",
        )
        started = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), started


def test_ctrl_c_in_a_tune_or_an_ab_keeps_what_was_measured_and_exits_130(tmp_path):
    from launch_helpers import assert_all_gone

    for command in (
        ["tune", "--budget-min", "3", "--bound-by", "compute"],
        ["ab", "--b", "optim.impl=\"foreach\"", "--rounds", "500"],
    ):
        root = tmp_path / command[0]
        done, started = _interrupted(
            [sys.executable, "-m", "workbench", *command, "--preset", "smoke", "--json"], root
        )
        assert done.returncode == 130, done.stderr[-2000:]
        out = json.loads(done.stdout)  # valid JSON, marked, holding what was measured
        assert out["interrupted"] == "SIGINT" and "Traceback" not in done.stderr
        if command[0] == "tune":
            assert out["decisions"] and all(d["outcome"] for d in out["decisions"])
        else:
            assert out["speedup_pairs"] + out["speedup_dropped"] >= 1
        assert_all_gone(started, within=30)  # nothing left running
