"""Profile a run config: a short real run in a worker (one process, or every rank under torchrun)
with a few steps after warm-up under torch.profiler, read back as a Breakdown.

    from workbench.profile.profiled_run import profile, default_transformer
    b = profile(default_transformer())      # about 20 steps of the small transformer
    print(b.text())

The run is the config's own (model, data, loader, precision, ranks, threads), shortened: warm-up,
`profile_steps` profiled steps, then unprofiled steps (as many again and more) so the profiler's
cost shows beside the run's own step time; no evaluation and no saved weights.
"""

from __future__ import annotations

from ..config import ConfigError, RunConfig
from ..distributed.launch import run
from .breakdown import Breakdown, read_breakdown
from .presets import default_transformer  # noqa: F401 - where the notebooks and benches find it

PROFILE_STEPS = 5


def profile_config(cfg: RunConfig, profile_steps: int = PROFILE_STEPS) -> RunConfig:
    """The profiling run of `cfg`: 4x `profile_steps` steps, the profiled ones right after warm-up."""
    if isinstance(profile_steps, bool) or not isinstance(profile_steps, int) or profile_steps < 1:
        raise ConfigError(f"profile_steps must be an integer >= 1, got {profile_steps!r}")
    model = cfg.model.name.rpartition(":")[2]
    label = cfg.run.label or f"profile-{model}-{cfg.precision.dtype}"
    return cfg.replace(
        **{
            "run.steps": 4 * profile_steps,
            "run.profile_steps": profile_steps,
            "run.eval_batches": 0,
            "run.save_weights": False,
            "run.label": label[:60],
        }
    )


def profile(
    cfg: RunConfig, profile_steps: int = PROFILE_STEPS, *, root=None, timeout_s: float = 900
) -> Breakdown:
    """Run the profiling run of `cfg` in a worker and return its breakdown. A run that does not
    complete is a ConfigError with its reason and folder."""
    pcfg = profile_config(cfg, profile_steps)
    if root is not None:
        pcfg = pcfg.replace(**{"run.runs_dir": str(root)})
    summary = run(pcfg, timeout_s=timeout_s)
    if summary.get("status") != "completed":
        raise ConfigError(
            f"the profiling run ended {summary.get('status')}: "
            f"{summary.get('message') or summary.get('error_type', '')} "
            f"(see {summary.get('run_dir')})"
        )
    return read_breakdown(summary["run_dir"], recommended_dtype(pcfg))


def is_profile_of(b: Breakdown, cfg: RunConfig) -> bool:
    """Whether `b` is a profile of `cfg` (wherever its run folder was made)."""

    def settings(config: dict) -> dict:
        return {**config, "run": {k: v for k, v in config["run"].items() if k != "runs_dir"}}

    mine = profile_config(cfg, b.config["run"]["profile_steps"]).to_dict()
    return settings(b.config) == settings(mine)


def recommended_dtype(cfg: RunConfig) -> str | None:
    """The precision to try first for this model on its device, from the precision lesson kept for
    it (workbench.hardware.lessons), as the notebooks and the panel say it; None where no lesson of
    this model is kept (then the advice says how to measure one, and says nothing it did not measure)."""
    from ..hardware.lessons import precision_lesson

    try:
        lesson = precision_lesson(cfg, measure=False)
    except (ConfigError, RuntimeError):
        return None
    return lesson.recommend if lesson is not None else None
