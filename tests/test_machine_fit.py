"""The one rule of what this machine can run (workbench.machine.fit) and the thread choice
(workbench.machine.threads), on faked machines: the launch, the stacking planner and the scaling
study give the same sentence, and the wait turns passive only when other programs hold cores."""
from __future__ import annotations

import pytest
import torch

from workbench.config import ConfigError, RunConfig
from workbench.distributed.limits import check_cores
from workbench.machine.fit import cannot_run, max_ranks
from workbench.machine.threads import choose_threads
from workbench.stacking.plan import plan

CPU = torch.device("cpu")


@pytest.mark.parametrize("cores", [1, 2])
def test_the_planner_skips_with_the_launchs_own_sentence(fake_cores, cores):
    fake_cores(cores)
    steps = plan(RunConfig.smoke(), ["workers", "ddp"])
    for s in steps:
        assert cannot_run(s.config, CPU) is None  # what a study runs, the launch accepts
        if s.reason:  # a skipped step keeps the config before it: the refused one adds its change
            with pytest.raises(ConfigError) as e:
                check_cores(s.config.replace(**s.change.settings))
            assert str(e.value) == s.reason
    assert [s.reason is None for s in steps] == ([True, False, False] if cores == 1 else [True, True, False])
    assert max_ranks(RunConfig.smoke(), CPU) == cores


def test_oversubscribe_is_the_users_override(fake_cores):
    fake_cores(1)
    cfg = RunConfig.smoke().replace(**{"distributed.nproc": 2})
    assert "distributed.nproc=2 rank(s) x 1 thread(s)" in cannot_run(cfg, CPU)
    assert cannot_run(cfg.replace(**{"run.oversubscribe": True}), CPU) is None


@pytest.mark.parametrize("other, policy", [(0.0, "default"), (0.2, "default"), (0.25, "passive"),
                                           (1.9, "passive")])
def test_the_wait_turns_passive_when_others_hold_cores(fake_cores, monkeypatch, other, policy):
    fake_cores(2)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    c = choose_threads(RunConfig.smoke(), other)
    assert (c.threads, c.wait_policy) == (2, policy)
    assert c.env() == ({"OMP_WAIT_POLICY": "PASSIVE"} if policy == "passive" else {})
    assert c.why.startswith(f"other processes held {other:.1f} of 2 cores: 2 thread(s) per rank")


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
