"""The one training loop's contract with its hooks, on a step function that only counts: the order
hooks are called in, a step function a hook hands back, the record the hooks share, an early end,
and saves every N steps and after the last, so a finished run can go on."""

from __future__ import annotations

from workbench.train.loop import Hook, run_loop


def counting_step(parts, batches):
    parts["calls"] += 1
    return float(parts["calls"]), 4, 0.0


class Seen(Hook):
    def __init__(self, name, log):
        self.name, self.log = name, log

    def before(self, step, fn):
        self.log.append((self.name, "before", step))
        return fn

    def after(self, result):
        result.record[self.name] = result.step
        self.log.append((self.name, "after", result.step, dict(result.record), result.last))


def test_hooks_run_in_order_around_each_step_and_share_its_record():
    log, parts = [], {"calls": 0}
    last = run_loop(parts, None, 3, 5, [Seen("a", log), Seen("b", log)], step_fn=counting_step)
    assert last == 5 and parts["calls"] == 3  # steps 3, 4 and 5: a resumed loop starts after its state
    assert log[:4] == [
        ("a", "before", 3),
        ("b", "before", 3),
        ("a", "after", 3, {"a": 3}, False),
        ("b", "after", 3, {"a": 3, "b": 3}, False),  # b reads what a added
    ]
    assert log[-1] == ("b", "after", 5, {"a": 5, "b": 5}, True)


def test_a_hook_can_hand_back_another_step_and_spent_ends_the_loop_early():
    calls = []

    class Measured(Hook):
        def before(self, step, fn):
            if step == 1:
                return lambda parts, batches: calls.append("measured") or fn(parts, batches)
            return fn

    saved = []
    parts = {"calls": 0}
    last = run_loop(
        parts,
        None,
        1,
        10,
        [Measured()],
        step_fn=counting_step,
        spent=lambda step: step >= 6,
        save_every=2,
        save=saved.append,
    )
    assert calls == ["measured"] and last == 6 and parts["calls"] == 6
    assert saved == [2, 4, 6]  # and after the last step the budget allowed: a run can be extended


def test_the_last_step_of_the_steps_is_saved_and_spent_is_not_asked_there():
    asked, saved = [], []
    run_loop(
        {"calls": 0}, None, 1, 4, step_fn=counting_step, spent=asked.append, save_every=2, save=saved.append
    )
    assert saved == [2, 4] and asked == [1, 2, 3]  # every rank asks as often: a collective under several
