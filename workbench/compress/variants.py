"""Every compressed variant of one model in one table: dense, masked (hooks on), pruned and made
real, CSR sparse, structurally pruned, int8 (dynamic, weight-only, each backend), structured+int8,
and 2:4 sparsity where the device has it. All are timed in the same interleaved rounds, so the
speedups are fair, and each gets a verdict.

    from workbench.compress.variants import compare_variants
    df = compare_variants(subject, amount=0.5, finetune_epochs=2)
"""

from __future__ import annotations

from torch import nn

from ..config import ConfigError
from .coverage import columns, coverage
from .unstructured import (
    SparseLinear,
    check_amount,
    copy_model,
    magnitude_prune,
    make_real,
    pruning_coverage,
    sparsity,
    to_sparse,
)
from .quantize import quantize, torchao_available, unsupported_reason
from .reasons import judge
from .stats import latencies, output_error, state_size_bytes
from .structured import structured_coverage, structured_prune
from .subject import Subject
from .prune_sweep import finetune


def build_variants(
    subject: Subject,
    amount: float = 0.5,
    finetune_epochs: int = 0,
    sparse_amount: float = 0.9,
    device: str = "cpu",
    structured: bool = True,
) -> tuple[dict, dict, list]:
    """name -> model, name -> row fields (kind, amount, coverage...), and the skipped variants
    (name, reason)."""
    check_amount(amount, 1, "amount")
    check_amount(sparse_amount, 1, "sparse_amount")
    dense = subject.model.eval()
    models: dict[str, nn.Module] = {"dense": dense}
    rows: dict[str, dict] = {"dense": {"kind": "dense", "amount": 0.0}}
    skipped: list[tuple[str, str]] = []
    masked_cov = pruning_coverage(dense)

    masked = magnitude_prune(copy_model(dense), amount, scope="global")
    if finetune_epochs:
        finetune(masked, subject, finetune_epochs)
    for name, kind, model in (
        (f"masked {amount:.0%} (hooks on)", "masked", masked),
        (f"unstructured {amount:.0%}", "unstructured", make_real(copy_model(masked))),
    ):
        models[name] = model
        rows[name] = {"kind": kind, "amount": amount, "_coverage": masked_cov}

    csr = magnitude_prune(copy_model(dense), sparse_amount, scope="global")
    if finetune_epochs:
        finetune(csr, subject, finetune_epochs)
    name = f"sparse CSR {sparse_amount:.0%}"
    try:
        models[name] = to_sparse(make_real(csr))
        rows[name] = {
            "kind": "sparse_csr",
            "amount": sparse_amount,
            "_coverage": _csr_coverage(dense, models[name], masked_cov),
        }
    except ConfigError as e:
        skipped.append((name, str(e)))

    key = f"structured {amount:.0%}"
    if structured:
        try:
            small = structured_prune(dense, amount, example=subject.example(2))
            if finetune_epochs:
                finetune(small, subject, finetune_epochs)
            models[key] = small
            cov = structured_coverage(dense, small)
            rows[key] = {"kind": "structured", "amount": amount, "tool": cov["tool"], "_coverage": cov}
        except ConfigError as e:
            skipped.append((key, str(e)))

    quant = [("dynamic_int8", "auto"), ("weight_only_int8", "auto"), ("semi_structured_2_4", "auto")]
    if torchao_available() and device == "cpu":
        quant.insert(1, ("dynamic_int8", "torchao"))
    for method, backend in quant:
        reason = unsupported_reason(method, device, backend)
        name = method if backend == "auto" else f"{method} ({backend})"
        if reason:
            skipped.append((name, reason))
            continue
        try:
            q, info = quantize(dense, method, backend=backend, device=device)
        except ConfigError as e:
            skipped.append((name, str(e)))
            continue
        models[name] = q
        rows[name] = _quant_row(method, 0.0, info)
    if key in models:
        try:
            q, info = quantize(models[key], "dynamic_int8", device=device)
            models[f"{key} + dynamic_int8"] = q
            rows[f"{key} + dynamic_int8"] = _quant_row("dynamic_int8", amount, info)
        except ConfigError as e:
            skipped.append((f"{key} + dynamic_int8", str(e)))
    return models, rows, skipped


def _quant_row(method: str, amount: float, info: dict) -> dict:
    return {
        "kind": method,
        "amount": amount,
        "backend": info["backend"],
        "converted": f"{info['converted']}/{info['linear_layers']}",
        "notes": "; ".join(info["notes"]),
        "_coverage": info["coverage"],
    }


def _csr_coverage(dense: nn.Module, sparse: nn.Module, masked_cov: dict) -> dict:
    """CSR storage reaches the Linear layers only: the pruned weights it did not convert stay
    dense tensors with zeros."""
    converted = {
        n: m.weight.to_dense().numel() for n, m in sparse.named_modules() if isinstance(m, SparseLinear)
    }
    left = {
        n: "pruned, but CSR storage converts Linear layers only: kept as a dense tensor with zeros"
        for n in masked_cov["layers_touched"]
        if n not in converted
    }
    return coverage(dense, converted, left)


def compare_variants(
    subject: Subject,
    amount: float = 0.5,
    finetune_epochs: int = 0,
    sparse_amount: float = 0.9,
    batch_sizes=(1, 64),
    rounds: int = 15,
    device: str = "cpu",
):
    """One row per variant (pandas DataFrame): accuracy, output error vs dense, parameters, size,
    coverage (share of the weights it touched, layers touched and left), latency at each batch
    size with the paired speedup vs dense and its interval, verdict and why. Skipped variants
    appear with their reason; `details` holds each variant's layer lists."""
    import pandas as pd

    models, rows, skipped = build_variants(subject, amount, finetune_epochs, sparse_amount, device)
    times = latencies(models, subject, batch_sizes, rounds)
    dense = models["dense"]
    dense_size = state_size_bytes(dense)
    x = subject.example(max(batch_sizes), seed=1)
    accuracy = {name: subject.evaluate(model) for name, model in models.items()}
    table = []
    for name, model in models.items():
        fields = dict(rows[name])
        cov = fields.pop("_coverage", None)
        row = {"variant": name, **fields}
        counts = sparsity(model) if not getattr(model, "_workbench_quantized", False) else {}
        size = state_size_bytes(model)
        row.update(
            accuracy=accuracy[name],
            dense_accuracy=accuracy["dense"],  # what a shown verdict is weighed against
            output_error=round(output_error(dense, model, x), 5),
            params=counts.get("params", getattr(model, "_workbench_params", None)),
            nonzero_weights=counts.get("nonzero_weights"),
            model_sparsity=counts.get("model_sparsity"),
            size_bytes=size,
            size_ratio=round(size / dense_size, 3),  # a fraction of the dense size: 0.27 is smaller
        )
        if cov:
            row.update(columns(cov), details=cov)
        row.update(times[name])
        row.update(
            judge(
                rows[name]["kind"],
                times[name],
                counts.get("sparsity", 0.0),
                cov,
                accuracy=(accuracy["dense"], accuracy[name]),
            )
        )
        table.append(row)
    for name, reason in skipped:
        table.append({"variant": name, "verdict": "skipped", "why": reason})
    return pd.DataFrame(table)


def pareto_front(df, x: str = "latency_b64_ms", y: str = "accuracy") -> list[str]:
    """Variants no other variant beats on both lower latency and higher accuracy."""
    pts = df.dropna(subset=[x, y])
    front = []
    for _, r in pts.iterrows():
        dominated = ((pts[x] <= r[x]) & (pts[y] >= r[y]) & ((pts[x] < r[x]) | (pts[y] > r[y]))).any()
        if not dominated:
            front.append(r["variant"] if "variant" in r else r.name)
    return front
