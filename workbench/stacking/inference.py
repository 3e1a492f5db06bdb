"""The inference end of the stacking study: take the trained model of the last step, then stack
structured pruning and int8 quantization on it, measuring inference samples/s (timed interleaved,
so the ratios are fair on a busy machine), accuracy and size at each step. Each step's gain over
the previous one is the median of their paired per-round ratios with its interval, and its status
the one verdict rule; `coverage` says how much of the model the step touched. Any run works, one
with your own model or Dataset too: the model comes back through its factory, the held-out split
is read batch by batch.

    from workbench.stacking.inference import inference_study
    df = inference_study(run_dir, amount=0.5)

Its table has the training study's columns where they mean the same (step, status, samples_per_s,
gains, reason), so the same waterfall draws it; size_mib and accuracy replace memory and loss.
"""

from __future__ import annotations

from ..compress.coverage import coverage_note
from ..compress.quantize import quantize
from ..compress.reasons import partial_verdict
from ..compress.stats import busy_note, latencies, state_size_bytes
from ..compress.structured import structured_coverage, structured_prune
from ..compress.subject import Subject
from ..config import ConfigError
from ..events import SAMPLES_PER_S
from ..measure import claims
from ..measure.ratios import paired_ratio
from ..measure.verdict import MIN_EFFECT, weighed
from ..trials.changes import STACK_STEP

COLUMNS = [
    STACK_STEP,
    "status",
    SAMPLES_PER_S,
    "gain_vs_prev",
    "gain_low",
    "gain_high",
    "gain_vs_baseline",
    "rounds",
    "coverage",
    "size_mib",
    "accuracy",
    "latency_ms",
    "reason",
]


def _variants(model, amount: float, method: str, example) -> tuple[dict, list, dict]:
    """label -> model for every step that can be built, (label, reason) for the others, and
    label -> coverage (the share of the model's weights the step touched)."""
    labels = ("trained model (fp32)", f"+ structured pruning {amount:.0%}", f"+ {method.replace('_', ' ')}")
    models, skipped, covered = {labels[0]: model.eval()}, [], {}
    current = model
    try:
        current = structured_prune(model, amount, example=example)
        models[labels[1]] = current.eval()
        covered[labels[1]] = structured_coverage(model, current)
    except ConfigError as e:
        skipped.append((labels[1], str(e)))
    try:
        models[labels[2]], info = quantize(current, method, device="cpu")
        covered[labels[2]] = info["coverage"]
    except ConfigError as e:
        skipped.append((labels[2], str(e)))
    order = {label: i for i, label in enumerate(labels)}
    return models, sorted(skipped, key=lambda s: order[s[0]]), covered


def inference_study(
    run_dir,
    amount: float = 0.5,
    method: str = "dynamic_int8",
    batch: int = 64,
    rounds: int = 15,
    min_effect: float = MIN_EFFECT,
    trust_code: bool = False,
):
    """A DataFrame, one row a step: the trained fp32 model, + structured pruning, + int8. A model
    factory the run names runs only when its folder is trusted, or with `trust_code`."""
    import pandas as pd

    subject = Subject.from_run(run_dir, trust_code=trust_code)
    models, skipped, covered = _variants(subject.model, amount, method, subject.example(2))
    times = latencies(models, subject, batch_sizes=(batch,), rounds=rounds)
    rows, base, prev_rounds, base_accuracy = [], None, None, None
    labels = list(models) + [s[0] for s in skipped]
    reasons = dict(skipped)
    for label in sorted(labels, key=lambda name: _position(name)):
        if label in reasons:
            rows.append({STACK_STEP: label, "status": "skipped", "reason": reasons[label]})
            continue
        t = times[label]
        ms, per_round = t[f"latency_b{batch}_ms"], t[f"latency_b{batch}_rounds_ms"]
        sps = round(batch / ms * 1e3, 2)
        cov = covered.get(label)
        row = {
            STACK_STEP: label,
            SAMPLES_PER_S: sps,
            "latency_ms": round(ms, 4),
            "size_mib": round(state_size_bytes(models[label]) / 2**20, 4),
            "accuracy": subject.evaluate(models[label]),
            "coverage": cov["coverage"] if cov else None,
            "reason": coverage_note(cov, "touched") if cov else busy_note(t),
        }
        if base is None:
            row.update(status="baseline", gain_vs_prev=1.0, gain_vs_baseline=1.0)
            base, base_accuracy = sps, row["accuracy"]
        else:  # paired round by round with the step before: the one verdict on its interval
            gain = paired_ratio(prev_rounds, per_round, min_effect)
            row.update(
                gain_vs_prev=round(gain.ratio, 3),
                gain_low=gain.low,
                gain_high=gain.high,
                rounds=gain.rounds,
                gain_vs_baseline=round(sps / base, 3),
                status=weighed(partial_verdict(gain.verdict, cov), base_accuracy, row["accuracy"]),
            )
            if base_accuracy is not None and row["accuracy"] is not None:
                claims.weighed(
                    "the inference study", row[STACK_STEP], row["status"], base_accuracy, row["accuracy"]
                )
        prev_rounds = per_round
        rows.append(row)
    df = pd.DataFrame(rows, columns=COLUMNS)
    df.attrs["accuracy_note"] = subject.accuracy_note()  # what its accuracy column is worth
    return df


def _position(label: str) -> int:
    return 0 if label.startswith("trained") else 1 if "pruning" in label else 2
