"""What a pruning or quantization touched: which parameterized layers it pruned or converted, which
it left as they were and why, and the fraction of the model's weights it touched (`coverage`).
Every result in the lab carries one of these, so no figure hides how much of the model it is about.

    from workbench.compress.coverage import coverage, coverage_note
    cov = coverage(model, touched={"lm_head": 1664}, reasons={"transformer.h.0.attn.c_attn": "..."})
    cov["coverage"], cov["layers_left"]; coverage_note(cov, "pruned")

Weights are parameter elements, a tied tensor counted once. A result that touched under half of
them is `partial`, and its verdict says so.
"""

from __future__ import annotations

from collections import Counter

from torch import nn

from .layers import LEFT_REASONS, kind_of, model_weights, parameterized_layers

PARTIAL = 0.5  # a result touching less than this share of the weights says so in its verdict


def default_reason(module: nn.Module, own: list[str]) -> str:
    kind = kind_of(module)
    if kind in ("embedding", "norm"):
        return LEFT_REASONS[kind]
    if kind == "other" and own and not list(module.children()):
        return LEFT_REASONS["other"] + f" ({type(module).__name__})"
    if kind == "other":
        return LEFT_REASONS["parameter"] + f" ({', '.join(own)})"
    return "left as it was"


def coverage(
    model: nn.Module, touched: dict[str, int], reasons: dict[str, str] | None = None, total: int | None = None
) -> dict:
    """`touched`: layer name -> weights it touched (each shared tensor under one name only).
    `reasons`: why a layer was left, by name (others get the reason of their kind). `total`: the
    model's weights when `model` is not the one they were counted on (a pruned copy)."""
    reasons = reasons or {}
    total = total if total is not None else model_weights(model)
    left = []
    for name, m, own in parameterized_layers(model):
        if name in touched:
            continue
        weights = sum(m._parameters.get(p, m._parameters.get(f"{p}_orig")).numel() for p in own)
        left.append(
            {
                "layer": name or type(model).__name__,
                "type": type(m).__name__,
                "weights": weights,
                "why": reasons.get(name) or default_reason(m, own),
            }
        )
    done = sum(touched.values())
    frac = done / total if total else 0.0
    return {
        "coverage": round(frac, 4),
        "touched_weights": done,
        "model_weights": total,
        "layers_touched": sorted(touched),
        "layers_left": left,
        "partial": frac < PARTIAL,
    }


def left_summary(cov: dict, limit: int = 3) -> str:
    """'24 Conv1D (a layer type the lab does not compress), 2 Embedding (...)': the left layers
    grouped by type and reason, the largest groups first."""
    groups = Counter((r["type"], r["why"]) for r in cov["layers_left"])
    parts = [f"{n} {t} ({why})" for (t, why), n in groups.most_common(limit)]
    more = len(groups) - limit
    return "; ".join(parts) + (f"; and {more} other kinds" if more > 0 else "")


def coverage_note(cov: dict, action: str) -> str:
    """One sentence for a table's `why` or a CLI line: what share was touched, what was left."""
    n = len(cov["layers_touched"])
    text = (
        f"{action} {n} layer{'s' if n != 1 else ''} holding {cov['coverage']:.1%} of the "
        f"model's weights ({cov['touched_weights']:,} of {cov['model_weights']:,})"
    )
    if cov["layers_left"]:
        text += f"; left as they were: {left_summary(cov)}"
    if cov["partial"]:
        text = f"partial: {text}"
    return text


def columns(cov: dict) -> dict:
    """The flat fields a table row carries; the whole report (layer lists) goes in `details`."""
    return {
        "coverage": cov["coverage"],
        "layers_touched": len(cov["layers_touched"]),
        "layers_left": len(cov["layers_left"]),
        "partial": cov["partial"],
    }
