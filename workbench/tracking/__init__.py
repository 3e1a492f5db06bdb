"""Your own training script in the workbench: two lines put any loop on the live dashboard, into
`workbench runs`, `compare`, the fault diagnosis and `workbench ab --cmd`.

    import workbench
    run = workbench.track(config=vars(args))          # before the loop
    for x, y in loader:
        with run.step(samples=len(x)) as step:        # around each optimizer step
            ...
            step.loss = loss

Or `run.log_step(loss=loss, samples=n)` after each step. The run folder is `run_dir`, else
$WORKBENCH_RUN_DIR, else a fresh one under runs/ ($WORKBENCH_RUNS); under torchrun every rank
writes its own events into the same folder. Nothing in the folder names code: reading it never
imports anything.
"""

from __future__ import annotations

import os
import sys

from .tracked_run import BUDGET_ENV, Run, Step  # noqa: F401 - the API

__all__ = ["track", "Run", "Step", "BUDGET_ENV"]


def track(
    config=None,
    run_dir: str | os.PathLike | None = None,
    *,
    label: str | None = None,
    model: str | None = None,
    precision: str | None = None,
    batch_size: int | None = None,
    steps: int | None = None,
    sinks=(),
    exit_at_budget: bool = True,
) -> Run:
    """Start tracking this process's training loop; returns the Run whose `step()` times each step.

    :param config: the script's own settings (a dict, an argparse Namespace, a dataclass or a
        RunConfig), recorded in script.json and sent to the sinks as parameters; None: none recorded.
    :param run_dir: the run folder, new or empty; None: $WORKBENCH_RUN_DIR, else a fresh one in the run store.
    :param label: the run's name in listings and in a fresh folder's name; None: the script's file name.
    :param model: the model a listing shows; None: a RunConfig's model name, else the label.
    :param precision: the precision a listing shows; None: a RunConfig's dtype, else none shown.
    :param batch_size: the batch size a listing shows; None: a RunConfig's, else the first step's samples.
    :param steps: the steps the dashboard expects; None: a RunConfig's run.steps, else not known.
    :param sinks: outlets that get the run's record, step figures and summary live (rank 0 only); () for none.
    :param exit_at_budget: with $WORKBENCH_TIME_BUDGET_S set, end the script once the budget is spent
        (exit code 0, after recording); False: the loop checks `run.should_stop` itself.
    """
    from ..train.rank import RankEnv
    from ..train.rank_process import attempt_of
    from . import ending, place
    from .record import script_record
    from .tracked_run import budget_from_env

    env = RankEnv.from_environ()
    budget = budget_from_env()
    name = place.label_of(label, sys.argv)
    path, fresh = place.choose(run_dir, name)
    record = script_record(
        config,
        sys.argv,
        name,
        env.world_size,
        model=model,
        precision=precision,
        batch_size=batch_size,
        steps=steps,
    )
    path = place.claim(path, env.rank, record, fresh)
    env.attempt = attempt_of(path, env)
    run = Run(path, env, record, budget, exit_at_budget, sinks)
    ending.install(run)
    if env.rank == 0:
        print(f"workbench: tracking this run in {path}", file=sys.stderr, flush=True)
    return run
