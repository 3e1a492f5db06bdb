"""An honest answer to "does it speed up?" for each compressed variant: the measured speedups
(interleaved with the dense model) judged by the one verdict rule (workbench.measure.verdict),
and the reason that holds for that kind of compression.

    from workbench.compress.reasons import judge
    judge("unstructured", {"speedup_b1": 1.01, "speedup_b64": 0.99}, sparsity=0.7)
"""
from __future__ import annotations

from ..measure.verdict import verdict

KINDS = ("dense", "masked", "unstructured", "sparse_csr", "structured", "dynamic_int8",
         "weight_only_int8", "semi_structured_2_4")

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
    ("sparse_csr", "*"): "sparse kernels pay off only at high sparsity (about 90 % and up on a "
                         "CPU); at {sparsity:.0%} their index overhead outweighs the skipped zeros",
    ("structured", "faster"): "removing whole neurons/channels shrinks the matmuls themselves: "
                              "fewer multiplies, smaller weights",
    ("structured", "*"): "the layers shrank, but at this size per-call overhead, not the "
                         "matmuls, sets the time",
    ("dynamic_int8", "faster"): "int8 weights are 4x fewer bytes to read and int8 matmul "
                                "kernels do more work per cycle",
    ("dynamic_int8", "*"): "the converted layers are a small share of the time (layers left in "
                           "float, quantizing activations per call, or a model too small)",
    ("weight_only_int8", "faster"): "4x fewer weight bytes to read: a memory-bound (small-batch) "
                                    "workload gains",
    ("weight_only_int8", "*"): "weights are stored as int8 but widened to float for the matmul: "
                               "4x less memory, the same compute; in eager mode on a CPU the "
                               "widening costs time",
    ("semi_structured_2_4", "faster"): "2:4 sparse tensor cores skip half the multiplies",
    ("semi_structured_2_4", "*"): "2:4 sparse kernels help large matmuls; these are too small",
    ("dense", "*"): "the reference",
}


def label(speedup: float | None) -> str:
    return verdict(speedup) or "not measured"


def judge(kind: str, speedups: dict, sparsity: float = 0.0) -> dict:
    """{'verdict': 'faster'|'within noise'|'slower', 'why': ...} judged at the largest batch
    measured; every batch size's speedup is quoted in `why`."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    keys = sorted((k for k in speedups if k.startswith("speedup_b") and speedups[k] is not None),
                  key=lambda k: int(k[len("speedup_b"):]))
    if kind == "dense":
        return {"verdict": "reference", "why": REASONS[("dense", "*")]}
    if not keys:
        return {"verdict": "not measured", "why": "no latency was measured"}
    lab = label(speedups[keys[-1]])
    text = REASONS.get((kind, lab), REASONS[(kind, "*")]).format(sparsity=sparsity)
    measured = ", ".join(f"{speedups[k]:.2f}x at batch {k[len('speedup_b'):]}" for k in keys)
    small, large = speedups[keys[0]], speedups[keys[-1]]
    if kind in ("dynamic_int8", "weight_only_int8") and len(keys) > 1:
        text += ("; memory-bound vs compute-bound: at batch 1 a layer whose weights do not fit in "
                 "cache is memory-bound (int8 reads 4x fewer bytes), at a large batch the matmul "
                 "is compute-bound (int8 kernels do more work per cycle)")
        if label(small) != label(large):
            text += (f"; here it is {label(small)} at batch 1 and {label(large)} at the large "
                     "batch: these layers are small enough that per-call work (quantizing the "
                     "activations, dispatch) decides at batch 1")
    return {"verdict": lab, "why": f"{measured}: {text}"}
