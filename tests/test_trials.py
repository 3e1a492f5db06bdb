"""A/B tests of training configs with real runs: an A/A test under a CPU hog comes out within noise
and flagged busy (the verdict rule's detection of real differences is tested on synthetic samples
in test_measure.py); the alternating order; the CLI's one-line refusals."""
from __future__ import annotations


import pytest

from workbench.cli import main as cli
from workbench.config import ConfigError
from workbench.procs import OtherWork
from workbench.runstore import read_summary
from workbench.trials.ab import ab_test
from workbench.trials.rounds import contention_of, run_rounds


@pytest.fixture
def cpu_hog():
    """Two busy processes, not this one's children: both cores held by other work."""
    with OtherWork(2) as hogs:
        yield hogs


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.timeout(600)
def test_a_a_under_a_cpu_hog_is_within_noise_and_flagged_busy(smoke, cpu_hog):
    cfg = smoke.replace(**{"run.steps": 20, "run.device": "cpu"})
    # 8 rounds: the interval is the range of the 8 ratios, so an A/A reads faster or slower in
    # 2 of 256 tries (6 rounds: 2 of 64, too often for a suite that must not flake)
    result = ab_test(cfg, cfg, rounds=8)
    assert result.ratio.rounds == 8 and result.ratio.low is not None
    assert result.ratio.verdict == "within noise", result.text()
    assert result.busy and result.contention["other_cpu_cores_max"] >= 0.25
    assert "the comparison is unreliable" in result.text()
    assert cpu_hog.alive()  # the hogs held the cores the whole time
    runs = [read_summary(d) for dirs in result.run_dirs.values() for d in dirs]
    assert {(s["threads"], s["wait_policy"]) for s in runs} == {(2, "passive")}  # chosen for the load
    assert all("other processes held" in s["threads_why"] for s in runs)


def test_run_rounds_alternates_and_refuses_bad_rounds(monkeypatch, smoke):
    order = []
    monkeypatch.setattr("workbench.trials.rounds.run",
                        lambda cfg, timeout_s, threads: order.append(cfg.run.label) or
                        {"status": "completed", "samples_per_s": 1.0, "run_dir": "x"})
    run_rounds({"a": smoke, "b": smoke}, 3)
    assert order == ["a-r0", "b-r0", "b-r1", "a-r1", "a-r2", "b-r2"]
    with pytest.raises(ConfigError, match="rounds must be an integer >= 1, got 0"):
        run_rounds({"a": smoke}, 0)
    assert contention_of([{}]) == {"busy": None, "runs": 0}


def test_ab_cli_refuses_bad_settings_in_one_line(capsys):
    assert cli(["ab", "--preset", "smoke", "--set", "loader.batch_size"]) == 2
    assert "--set needs FIELD=VALUE" in capsys.readouterr().err
    assert cli(["ab", "--preset", "smoke", "--vs", "loader.batch_size=0"]) == 2
    assert "loader.batch_size must be >= 1, got 0" in capsys.readouterr().err
    assert cli(["ab", "--preset", "smoke", "--rounds", "0"]) == 2
