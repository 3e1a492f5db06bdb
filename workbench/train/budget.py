"""The time budget (run.time_budget_s): a run's steps end once they have taken that many seconds,
warm-up included, as run.steps ends them after N steps; whichever comes first ends the run. A
compiled run's budget starts after its warm-up instead: its first steps are the compile (seconds to
minutes, once), and a budget of a few seconds would otherwise end it before one compiled step ran.

Every rank must stop after the same step (DDP's next all-reduce would wait for a rank that stopped),
so with several ranks the slowest clock decides: one one-number all-reduce (MAX) per step, made only
when a budget is set.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist


class TimeBudget:
    def __init__(self, seconds: float, world_size: int, device: torch.device):
        self.seconds, self.world_size, self.device = seconds, world_size, device
        self.restart()

    def restart(self) -> None:
        self.t0 = time.perf_counter()

    def spent(self) -> bool:
        """Whether the steps so far used up the budget, the same answer on every rank."""
        if not self.seconds:
            return False
        over = time.perf_counter() - self.t0 >= self.seconds
        if self.world_size > 1 and dist.is_initialized():
            flag = torch.tensor([float(over)], device=self.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            over = bool(flag.item())
        return over


def ended_note(cfg, steps_run: int) -> dict:
    """What ended the steps, for the summary: 'steps' or 'time_budget', with its sentence."""
    if steps_run < cfg.run.steps:
        return {
            "ended_by": "time_budget",
            "steps_planned": cfg.run.steps,
            "ended_note": f"ended by its time budget ({cfg.run.time_budget_s:g} s) after "
            f"{steps_run} of at most {cfg.run.steps} steps",
        }
    return {"ended_by": "steps"}
