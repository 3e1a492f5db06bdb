"""The contention benchmark's processes: every variant gets its turns, the choice runs the thread
trial a run would, a process that ends early is an error with its own words, and a round leaves no
process behind."""

import psutil
import pytest

from tools.bench.contention import VARIANTS, Contender, one_round
from workbench.config import RunConfig
from workbench.machine.threads import ThreadChoice, choose_threads


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_a_round_gives_every_variant_its_turns_and_ends_its_processes():
    before = _children()  # what other tests may have left running (a launcher's spares)
    rates = one_round(RunConfig.smoke(), VARIANTS, seconds=0.2, turns=2)
    assert set(rates) == set(VARIANTS)
    assert all(rate > 0 for rate, _ in rates.values())
    assert rates["1 thread"][1] == "1t spin"
    assert rates["2 threads"][1] == "2t spin"
    assert rates["2 threads, passive"][1] == "2t passive"
    assert not _children() - before


def test_the_choice_runs_the_thread_trial_a_busy_launch_asks_for(monkeypatch):
    busy = ThreadChoice(2, "passive", "a test's busy choice", 1.9, trial=(2, 1))
    monkeypatch.setattr("tools.bench.contention.choose_threads", lambda cfg, other: busy)
    rates = one_round(RunConfig.smoke(), ("2 threads", "workbench's choice"), seconds=0.2, turns=1)
    assert rates["workbench's choice"][1] in ("1t passive (tried 2,1)", "2t passive (tried 2,1)")
    assert rates["2 threads"][1] == "2t spin"  # the fixed settings try nothing


def test_a_process_that_ends_before_its_turn_is_an_error_naming_its_setting():
    cfg = RunConfig.smoke()
    contender = Contender(cfg, "2 threads, passive", choose_threads(cfg, 0.0))
    contender.proc.kill()
    try:
        with pytest.raises(RuntimeError, match="a 2t passive process ended early"):
            contender.answer()
    finally:
        contender.stop()
    assert contender.proc.poll() is not None
