"""An honest answer to "does it speed up?" for each compressed variant: the verdict of the paired
speedup's interval at the largest batch (`workbench.measure.ratios`: faster or slower only when
the median is beyond 1 by more than the minimum effect and the whole interval lies on that side
of 1, else within noise), the reason that
holds for that kind of compression, and what the measurement leaves out: a result that touched
under half of the model's weights says so in its verdict, one timed on a busy machine in its why.

    from workbench.compress.reasons import judge
    judge("unstructured", latencies(...)["pruned"], sparsity=0.7, coverage=cov)
"""

from __future__ import annotations

from ..measure.verdict import weighed
from .coverage import coverage_note
from .stats import speedup_label


KINDS = (
    "dense",
    "masked",
    "unstructured",
    "sparse_csr",
    "structured",
    "dynamic_int8",
    "weight_only_int8",
    "semi_structured_2_4",
)

REASONS = {
    ("masked", "slower"): "the pruning hook recomputes weight = weight_orig * mask before every "
    "forward, then the dense kernel multiplies the zeros anyway",
    ("masked", "*"): "masks only zero weights; the dense kernel still does every multiply, and "
    "the hook adds a multiply of its own per layer",
    ("unstructured", "faster"): "measured faster, yet zeros in a dense tensor cost the same work; "
    "look at the spread before believing it",
    ("unstructured", "*"): "dense kernels ignore zeros: {sparsity:.0%} zeros in a dense tensor "
    "cost the same multiplies, and the file stores them too",
    ("sparse_csr", "faster"): "at {sparsity:.0%} sparsity the CSR kernel skips enough zeros to "
    "beat the dense matmul",
    ("sparse_csr", "*"): "at {sparsity:.0%} sparsity the CSR kernel's index overhead outweighed the "
    "zeros it skipped, here",
    ("structured", "faster"): "removing whole neurons/channels shrinks the matmuls themselves: "
    "fewer multiplies, smaller weights",
    ("structured", "*"): "the layers shrank, but at this size per-call overhead, not the "
    "matmuls, sets the time",
    ("dynamic_int8", "faster"): "int8 weights are 4x fewer bytes to read and int8 matmul "
    "kernels do more work per cycle",
    ("dynamic_int8", "*"): "what the int8 matmul saved did not outweigh quantizing each call's "
    "input and dequantizing its output at this size; layers left in float "
    "run as before (the share converted is below)",
    ("weight_only_int8", "faster"): "4x fewer weight bytes to read: a memory-bound (small-batch) "
    "workload gains",
    ("weight_only_int8", "*"): "weights are stored as int8 but widened to float for the matmul: "
    "4x less memory, the same compute; in eager mode on a CPU the "
    "widening costs time",
    ("semi_structured_2_4", "faster"): "2:4 sparse tensor cores skip half the multiplies",
    ("semi_structured_2_4", "*"): "2:4 sparse kernels help large matmuls; these are too small",
    ("dense", "*"): "the reference",
}


def label(rec: dict, batch: int) -> str:
    """The verdict the interval gave at one batch size ('not measured' without one)."""
    return rec.get(f"speedup_b{batch}_verdict") or "not measured"


def partial_verdict(verdict: str, cov: dict | None) -> str:
    """'faster' -> 'faster, partial: 0.8 % of the weights' when the result touched under half."""
    if not cov or not cov.get("partial"):
        return verdict
    share = cov["coverage"]
    return (
        f"{verdict}, partial: {share:.1%} of the weights"
        if share < 0.1
        else f"{verdict}, partial: {share:.0%} of the weights"
    )


def judge(
    kind: str,
    timing: dict,
    sparsity: float = 0.0,
    coverage: dict | None = None,
    accuracy: tuple[float, float] | None = None,
) -> dict:
    """{'verdict': ..., 'why': ...}: the verdict at the largest batch measured, every batch
    size's speedup quoted with its interval, pairs and load, the reason and the coverage; with
    `accuracy` (the reference's, the variant's) a verdict that cost accuracy says so
    (workbench.measure.verdict.weighed)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    batches = sorted(
        int(k[len("speedup_b") :])
        for k in timing
        if k.startswith("speedup_b") and k[len("speedup_b") :].isdigit() and timing[k] is not None
    )
    if kind == "dense":
        return {"verdict": "reference", "why": REASONS[("dense", "*")]}
    if not batches:
        return {"verdict": "not measured", "why": "no latency was measured"}
    lab = label(timing, batches[-1])
    text = REASONS.get((kind, lab), REASONS[(kind, "*")]).format(sparsity=sparsity)
    measured = "; ".join(f"{speedup_label(timing, b, conditions=False)} at batch {b}" for b in batches)
    small = label(timing, batches[0])
    if kind in ("dynamic_int8", "weight_only_int8") and len(batches) > 1:
        text += (
            "; memory-bound vs compute-bound: at batch 1 a layer whose weights do not fit in "
            "cache is memory-bound (int8 reads 4x fewer bytes), at a large batch the matmul "
            "is compute-bound (int8 kernels do more work per cycle)"
        )
        if small != lab:
            text += (
                f"; here it is {small} at batch {batches[0]} and {lab} at the large batch: "
                "these layers are small enough that per-call work (quantizing the "
                "activations, dispatch) decides at small batches"
            )
    why = f"{measured}: {text}"
    if coverage:
        why += f"; {coverage_note(coverage, 'converted' if 'int8' in kind else 'pruned')}"
    # a row that lost accuracy never reads as a clean gain; the table showing it checks so
    said = weighed(partial_verdict(lab, coverage), *(accuracy or (None, None)))
    return {"verdict": said, "why": why}


def measured_sentence(df, kind: str, batch: int) -> str:
    """What the first variant of `kind` in a variants table did here, in one line: its paired
    speedup at `batch` with the interval and verdict ('' when the table has none). The notebooks
    print this instead of saying in prose what a kind of compression does on a CPU."""
    rows = [r for r in df.to_dict("records") if r.get("kind") == kind]
    if not rows:
        return ""
    return f"{rows[0]['variant']}: {speedup_label(rows[0], batch)} at batch {batch}"
