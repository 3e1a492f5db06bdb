"""The activation-checkpointing trade, measured: memory saved (activations counted in a profiled
run with and without `train.checkpoint`) beside time paid (an A/B test of the two configs: short
real runs in alternating rounds, the speed ratio with its interval and the one verdict rule), and
whether the losses stayed the same.

    t = checkpoint_trade(default_transformer(), ["blocks.layers.*"])
    print(t.text())   # 'activations 27.0 -> 4.4 MiB (84 % less); speed 0.72x [0.66, 0.80] ...'
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ConfigError, RunConfig
from ..events import EVENT, LOSS, RANK, STEP, STEP_NUMBER, read_events
from ..train.activation_checkpointing import suggested
from ..trials.config_ab import ABResult, ab_test
from .breakdown import Breakdown
from .memory_breakdown import mib
from .profiled_run import is_profile_of, profile

LOSS_RTOL = 1e-4  # recompute replays the same arithmetic: the losses should agree to rounding


@dataclass
class CheckpointTrade:
    modules: list
    off: Breakdown
    on: Breakdown
    ab: ABResult | None  # speed of "checkpoint" over "off"; None when not timed

    @property
    def activations(self) -> tuple[int, int]:
        return self.off.memory.bytes["activations"], self.on.memory.bytes["activations"]

    @property
    def saved_fraction(self) -> float:
        off, on = self.activations
        return 1 - on / off if off else 0.0

    @property
    def peak_allocated(self) -> tuple[int | None, int | None]:
        return tuple(b.memory.device.get("peak_allocated_bytes") for b in (self.off, self.on))

    def loss_gap(self) -> float:
        """The largest relative difference between the two runs' losses, step by step."""
        a, b = _losses(self.off.run_dir), _losses(self.on.run_dir)
        gaps = [abs(a[s] - b[s]) / max(abs(a[s]), 1e-12) for s in a if s in b]
        return max(gaps) if gaps else float("nan")

    def text(self) -> str:
        off, on = self.activations
        lines = [
            f"checkpointing {', '.join(self.on.memory.checkpointed or self.modules)}:",
            f"  memory: activations {mib(off)} -> {mib(on)} ({self.saved_fraction:.0%} less, "
            "measured from the tensors autograd keeps)",
        ]
        pa, pb = self.peak_allocated
        if pa and pb:
            lines.append(f"  GPU allocator peak {mib(pa)} -> {mib(pb)}")
        lines.append(backward_line(self.off.phases_ms["backward"], self.on.phases_ms["backward"]))
        if self.ab is not None:
            r = self.ab.ratio
            paid = f"; a step takes {1 / r.ratio:.2f}x as long" if r.verdict == "slower" else ""
            lines.append(f"  time: speed with checkpointing vs without {r.label()}{paid}")
            if self.ab.busy:
                lines.append("  the machine was busy during the A/B runs: the time figure is unreliable")
        gap = self.loss_gap()
        same = "the same" if gap <= LOSS_RTOL else "DIFFERENT"
        lines.append(
            f"  losses: {same} step by step (largest relative gap {gap:.1e}, tolerance {LOSS_RTOL:.0e})"
        )
        return "\n".join(lines)

    def as_dict(self) -> dict:
        off, on = self.activations
        out = {
            "modules": self.modules,
            "activations_off_bytes": off,
            "activations_on_bytes": on,
            "saved_fraction": round(self.saved_fraction, 4),
            "loss_gap": self.loss_gap(),
            "backward_ms": [self.off.phases_ms["backward"], self.on.phases_ms["backward"]],
            "run_dirs": [str(self.off.run_dir), str(self.on.run_dir)],
        }
        if self.ab is not None:
            out["speed"] = self.ab.as_dict()
        return out


def _losses(run_dir) -> dict:
    return {
        r[STEP_NUMBER]: r[LOSS] for r in read_events(run_dir) if r.get(EVENT) == STEP and r.get(RANK, 0) == 0
    }


def trade_modules(cfg: RunConfig, modules: list[str] | None = None) -> list[str]:
    """The modules a trade checkpoints; ConfigError when neither the caller nor the model names any."""
    modules = list(modules or cfg.train.checkpoint or suggested(cfg.model.name))
    if not modules:
        raise ConfigError(
            f"train.checkpoint needs module names for {cfg.model.name!r}: name the "
            "modules of your model to checkpoint (e.g. ['layers.*'])"
        )
    return modules


def checkpoint_trade(
    cfg: RunConfig,
    modules: list[str] | None = None,
    *,
    rounds: int | None = None,
    profile_steps: int = 3,
    timed: bool = True,
    root=None,
    on_slice=None,
    baseline: Breakdown | None = None,
) -> CheckpointTrade:
    """Profile `cfg` with and without checkpointing `modules` (default: the config's own
    train.checkpoint, else the built-in model's suggestion) and, when `timed`, A/B test their speed
    in `rounds` pairs of slices in one warm process (workbench.trials.config_ab; the losses are compared on
    the profiles, step by step). `baseline`, a profile of `cfg` without checkpointing already
    made, stands for the profile without (a profile of another config is not used)."""
    modules = trade_modules(cfg, modules)
    base = cfg.replace(**{"train.checkpoint": [], "run.profile_steps": 0})
    ckpt = base.replace(**{"train.checkpoint": modules})
    reuse = baseline is not None and is_profile_of(baseline, base)
    off = baseline if reuse else profile(base, profile_steps, root=root)
    on = profile(ckpt, profile_steps, root=root)
    ab = None
    if timed:
        if root is not None:
            base, ckpt = (c.replace(**{"run.runs_dir": str(root)}) for c in (base, ckpt))
        ab = ab_test(base, ckpt, rounds, ("off", "checkpoint"), on_slice=on_slice)
    return CheckpointTrade(modules, off, on, ab)


def backward_line(off_ms: float, on_ms: float) -> str:
    """What the profile says of backward with checkpointing, in words that follow its numbers: the
    recompute runs there, so it should grow; a few profiled steps can say otherwise, and then the
    line says the A/B's interval is the measurement, not this."""
    said = f"  profiled backward {off_ms:.2f} -> {on_ms:.2f} ms"
    if on_ms > off_ms:
        return said + " (longer: the recompute runs there)"
    return said + (
        " (not longer, although the recompute runs there: these are a few profiled steps each, "
        "and the A/B below, in paired slices with an interval, is the measurement of the cost)"
    )
