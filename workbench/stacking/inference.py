"""The inference end of the stacking study: take the trained model of the last step, then stack
structured pruning and int8 quantization on it, measuring inference samples/s (timed interleaved,
so the ratios are fair on a busy machine), accuracy and size at each step.

    from workbench.stacking.inference import inference_study
    df = inference_study(run_dir, amount=0.5)

Its table has the training study's columns where they mean the same (step, status, samples_per_s,
gains, reason), so the same waterfall draws it; size_mib and accuracy replace memory and loss.
"""
from __future__ import annotations

from ..compress.quantize import quantize
from ..compress.stats import latencies, state_size_bytes
from ..compress.structured import structured_prune
from ..compress.subject import Subject
from ..config import ConfigError
from ..measure.verdict import MIN_EFFECT, verdict

COLUMNS = ["step", "status", "samples_per_s", "gain_vs_prev", "gain_vs_baseline", "size_mib",
           "accuracy", "latency_ms", "reason"]


def _variants(model, amount: float, method: str) -> tuple[dict, list]:
    """label -> model for every step that can be built, and (label, reason) for the others."""
    labels = ("trained model (fp32)", f"+ structured pruning {amount:.0%}", f"+ {method.replace('_', ' ')}")
    models, skipped = {labels[0]: model.eval()}, []
    current = model
    try:
        current = structured_prune(model, amount)
        models[labels[1]] = current.eval()
    except ConfigError as e:
        skipped.append((labels[1], str(e)))
    try:
        models[labels[2]], _ = quantize(current, method, device="cpu")
    except ConfigError as e:
        skipped.append((labels[2], str(e)))
    order = {label: i for i, label in enumerate(labels)}
    return models, sorted(skipped, key=lambda s: order[s[0]])


def inference_study(run_dir, amount: float = 0.5, method: str = "dynamic_int8", batch: int = 64,
                    rounds: int = 15, min_effect: float = MIN_EFFECT, trust_code: bool = False):
    """A DataFrame, one row a step: the trained fp32 model, + structured pruning, + int8. A model
    factory the run names runs only when its folder is trusted, or with `trust_code`."""
    import pandas as pd

    subject = Subject.from_run(run_dir, trust_code=trust_code)
    models, skipped = _variants(subject.model, amount, method)
    times = latencies(models, subject, batch_sizes=(batch,), rounds=rounds)
    rows, prev, base = [], None, None
    labels = list(models) + [s[0] for s in skipped]
    reasons = dict(skipped)
    for label in sorted(labels, key=lambda name: _position(name)):
        if label in reasons:
            rows.append({"step": label, "status": "skipped", "reason": reasons[label]})
            continue
        ms = times[label][f"latency_b{batch}_ms"]
        sps = round(batch / ms * 1e3, 2)
        row = {"step": label, "samples_per_s": sps, "latency_ms": round(ms, 4), "reason": "",
               "size_mib": round(state_size_bytes(models[label]) / 2**20, 4),
               "accuracy": subject.evaluate(models[label])}
        if base is None:
            row.update(status="baseline", gain_vs_prev=1.0, gain_vs_baseline=1.0)
            base = sps
        else:
            row.update(gain_vs_prev=round(sps / prev, 3), gain_vs_baseline=round(sps / base, 3))
            row["status"] = verdict(row["gain_vs_prev"], min_effect=min_effect)
        prev = sps
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def _position(label: str) -> int:
    return 0 if label.startswith("trained") else 1 if "pruning" in label else 2
