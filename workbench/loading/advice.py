"""What to set, from what was measured on this machine: cores per training process, the fastest
loader setting that fits them, and what pinning and persistent workers buy here.

    from workbench.loading.advice import recommend
    advice = recommend(summarize_sweep(records), nproc=1)
    print(advice["text"])
"""

from __future__ import annotations

import math

import torch

from ..config import ConfigError
from ..events import SAMPLES_PER_S
from ..machine.cpu import usable_cores
from ..measure import claims
from ..measure.verdict import FASTER
from .loader_sweep import vs_zero_workers


def wait_share_sentence(data_wait_frac: float) -> str:
    """The sentence the dashboards and notebooks print for a run's data_wait_frac."""
    pct = round(100 * data_wait_frac)
    if pct >= 20:
        hint = "the input pipeline is a bottleneck: try loader workers or a cache"
    elif pct >= 5:
        hint = "some time is lost to loading"
    else:
        hint = "loading is not the bottleneck"
    return f"your device waited for data {pct} % of the time ({hint})"


def recommend(table, nproc: int = 1, cores: int | None = None, cuda: bool | None = None) -> dict:
    """Pick the loader setting to use from a summarize_sweep table.

    Workers per process are capped at the cores each training process gets (`cores // nproc`):
    more workers than cores only take turns. A faster setting wins only if the verdict rule calls it
    faster than the simplest one (0 workers, same batch size), round by round with its interval."""
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise ConfigError(
            f"nproc (training processes sharing the cores) must be an integer >= 1, got {nproc!r}"
        )
    cores = cores or usable_cores()
    cuda = torch.cuda.is_available() if cuda is None else cuda
    per_proc = max(1, cores // max(1, nproc))
    rows = [r for r in table.to_dict("records") if r["num_workers"] <= per_proc]
    if not rows:
        rows = table.to_dict("records")
    best = max(rows, key=lambda r: r[SAMPLES_PER_S])
    base = next((r for r in rows if r["num_workers"] == 0 and r["batch_size"] == best["batch_size"]), None)
    reasons = [
        f"{cores} usable core(s) and {nproc} training process(es): at most {per_proc} "
        f"loader worker(s) per process; settings with more were not considered"
    ]
    fastest = best
    gain = None
    if base is not None and base is not best:
        gain = vs_zero_workers(
            base.get("rates") or [base[SAMPLES_PER_S]], best.get("rates") or [best[SAMPLES_PER_S]]
        )
        if gain.verdict != "faster":
            reasons.append(
                f"the fastest ({best['setting']}) against 0 workers: {gain.label()}, "
                "not called faster: keep the simpler setting"
            )
            best = base
        else:
            reasons.append(
                f"{best['setting']} against 0 workers at batch size {best['batch_size']}: {gain.label()}"
            )
    # the advice is a claim: a busier setting only where its interval calls it faster, and 0 workers
    # only where nothing measured beat it
    claims.record(
        "the loader advice",
        "verdict",
        f"use {best['setting']}",
        (best is base and (gain is None or gain.verdict != FASTER))
        or (gain is not None and gain.verdict == FASTER),
        f"the fastest, {fastest['setting']}, against 0 workers: {gain.label()}"
        if gain is not None
        else "the fastest setting measured was itself the simplest (0 workers)"
        if base is not None
        else "no 0-worker setting was measured to compare with",
    )
    speedup = (
        vs_zero_workers(
            base.get("rates") or [base[SAMPLES_PER_S]], best.get("rates") or [best[SAMPLES_PER_S]]
        ).ratio
        if base is not None
        else float("nan")
    )
    e1, e2 = best.get("first_batch_ms_epoch1"), best.get("first_batch_ms_epoch2")
    if best["num_workers"] > 0 and not best["persistent_workers"] and _num(e2):
        reasons.append(
            f"every epoch restarts the workers: first batch {e2:.0f} ms; "
            "persistent_workers=True keeps them (worth it for short epochs)"
        )
    elif best["persistent_workers"] and _num(e1) and _num(e2):
        reasons.append(
            f"persistent workers: the 2nd epoch's first batch took {e2:.0f} ms instead of {e1:.0f} ms"
        )
    if cuda:
        reasons.append(
            "pin_memory=True lets host-to-GPU copies run asynchronously (non_blocking); "
            "keep it when the sweep shows no loss"
        )
    else:
        reasons.append(
            "no GPU: pin_memory has no effect here (the loader ignores it), so it was "
            "not measured; it matters only for host-to-GPU copies"
        )
    wait = best.get("data_wait_frac")
    if _num(wait):
        reasons.append(wait_share_sentence(wait) + f" with {best['setting']}")
    loader = {k: best[k] for k in ("num_workers", "batch_size", "prefetch_factor", "persistent_workers")}
    loader["pin_memory"] = bool(cuda and best["pin_memory"])
    loader = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in loader.items()}
    loader = {k: (int(v) if isinstance(v, float) else v) for k, v in loader.items()}
    versus = (
        f"{speedup:.2f}x the samples/s of 0 workers"
        if base is not None and best is not base
        else f"no setting with workers was measured faster than it (the fastest, {fastest['setting']}: "
        f"{gain.label()})"
        if gain is not None
        else "the fastest setting measured"
        if base is not None
        else "no 0-worker setting was measured to compare with"
    )
    text = f"Use {best['setting']}: {versus}. " + " ".join(r[0].upper() + r[1:] + "." for r in reasons)
    # speedup_vs_0_workers: nan without a baseline
    return {
        "setting": best["setting"],
        "loader": loader,
        "speedup_vs_0_workers": round(speedup, 3),
        "reasons": reasons,
        "text": text,
        "config_changes": {f"loader.{k}": v for k, v in loader.items()},
    }


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not math.isnan(v)
