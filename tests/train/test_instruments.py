"""The rank's instruments as hooks on the one loop, in this process on a real model and real steps:
the phase an error names, the warm-up's end, the one step that measures what a step holds (and
changes none of its numbers), and the step's event with its figures and flags."""

from __future__ import annotations

import math
from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from workbench.events import RSS_GIB, EventWriter, read_events
from workbench.train.instruments import PhaseNames, Profiling, StepEvents, WarmupEnd
from workbench.train.loop import Hook, run_loop
from workbench.train.mfu import MfuMeter
from workbench.train.saved_tensors import saved_for_backward
from workbench.train.sharding import ACTIVATIONS, GRADIENTS
from workbench.train.step import StepParts, train_step
from workbench.train.trainer import Steps


# Behaviour, not speed: one thread keeps these steady under load.
pytestmark = pytest.mark.usefixtures("one_thread")


def parts(seed: int = 0) -> StepParts:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    return StepParts(
        model, model, opt, scaler, nullcontext(), nn.functional.cross_entropy, torch.device("cpu")
    )


def batches(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    while True:
        yield torch.randn(4, 8, generator=g), torch.randint(0, 3, (4,), generator=g)


def test_phase_names_say_the_step_and_the_warmup_end_restarts_the_meter_and_a_compiled_budget():
    phase, log = SimpleNamespace(name="starting"), []

    class Restarts:
        def __init__(self, name):
            self.name = name

        def restart(self):
            log.append((self.name, seen[-1]))

    seen = []

    class Watch(Hook):
        def before(self, step, fn):
            seen.append(phase.name)
            return fn

    hooks = [PhaseNames(phase), Watch(), WarmupEnd(2, Restarts("meter"), Restarts("budget"), compiled=True)]
    run_loop(parts(), batches(), 1, 5, hooks, step_fn=train_step)
    assert seen == ["step 1", "step 2", "step 3", "step 4", "step 5"]
    assert log == [("meter", "step 3"), ("budget", "step 3")]  # once, at the first timed step
    log.clear()
    run_loop(
        parts(), batches(), 1, 5, [WarmupEnd(2, None, Restarts("budget"), compiled=False)], step_fn=train_step
    )
    assert log == []  # no meter, and an eager run's budget ran from the start


def test_the_measured_step_holds_what_a_forward_saves_and_changes_no_loss():
    out = Steps()
    measured = parts()
    losses = {}

    class Losses(Hook):
        def __init__(self, key):
            self.key = key

        def after(self, r):
            out.times.append(r.seconds)  # as StepEvents does: the measured step is counted from it
            losses.setdefault(self.key, []).append(r.loss)

    run_loop(
        measured,
        batches(),
        1,
        4,
        [Profiling(None, measured.model, out), Losses("measured")],
        step_fn=train_step,
    )
    plain = parts()
    run_loop(plain, batches(), 1, 4, [Losses("plain")], step_fn=lambda p, b: train_step(p, b))
    assert losses["measured"] == losses["plain"]  # measuring is not a change to the numbers
    assert out.measured == 1 and set(out.held) == {ACTIVATIONS, GRADIENTS}
    assert out.held[GRADIENTS] == sum(p.numel() * 4 for p in plain.model.parameters())
    x, y = next(batches())
    with saved_for_backward(plain.model) as saved:  # the same count on a forward of the same size
        nn.functional.cross_entropy(plain.model(x), y)
    assert out.held[ACTIVATIONS] == sum(b for b, _ in saved.values()) > 0


def test_each_step_writes_its_event_with_its_figures_and_a_budget_end_is_flagged(tmp_path):
    p = parts()
    out = Steps()
    s = SimpleNamespace(parts=p, mfu=MfuMeter(None, None, "fp32"), t_launch=0.0)
    events = EventWriter(tmp_path)
    hooks = [StepEvents(events, out, s, mem_every_s=3600, fp16=False, total_steps=10)]
    last = run_loop(p, batches(), 1, 10, hooks, step_fn=train_step, spent=lambda step: step == 3)
    events.close()
    steps = [r for r in read_events(tmp_path) if r["event"] == "step"]
    assert last == 3 and [r["step"] for r in steps] == [1, 2, 3]
    assert [r.get("last") for r in steps] == [None, None, True]  # ended by the budget, not stalled
    assert RSS_GIB in steps[0] and RSS_GIB not in steps[1]  # memory on a timer, not every step
    assert [r["loss"] for r in steps] == out.losses and len(out.times) == 3 and out.first_step_s > 0
    assert all(r["samples_per_s"] > 0 and r["step_time_ms"] > 0 for r in steps)


def test_a_loss_that_is_not_finite_is_counted_from_the_step_it_first_appeared(tmp_path):
    out = Steps()
    s = SimpleNamespace(parts=parts(), mfu=MfuMeter(None, None, "fp32"), t_launch=0.0)
    events = EventWriter(tmp_path)
    losses = iter([1.0, math.nan, 2.0, math.inf])
    run_loop(
        s.parts,
        None,
        1,
        4,
        [StepEvents(events, out, s, mem_every_s=3600, fp16=False, total_steps=4)],
        step_fn=lambda parts, b: (next(losses), 4, 0.0),
    )
    events.close()
    assert out.nonfinite == 2 and out.first_nonfinite == 2
    counts = [r.get("nonfinite_losses") for r in read_events(tmp_path) if r["event"] == "step"]
    assert counts == [None, 1, None, 2]
