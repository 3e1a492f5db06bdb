"""Part "compression": the pruning and quantization lab on the GPU, each variant timed interleaved with
its dense model (workbench.measure.timer.interleaved, ROUNDS rounds) and compared by the measurement
core (paired ratio, interval, verdict).

- 2:4 semi-structured sparsity (workbench.compress.quantize, method semi_structured_2_4) of a large
  two-layer MLP in fp16, at a size where sparse tensor cores should pay (batch and widths in the
  thousands), checked against the dense model with the same 2:4 weights; where torch picks cuSPARSELt,
  the CUTLASS kernels are timed too.
- Structured pruning (workbench.compress.structured): half the neurons of a wide MLP removed, in bf16.
- int8 through torchao: dynamic int8 at a large batch (compute-bound) and weight-only int8 at batch 16
  (memory-bound), against bf16; skipped with the reason where torchao is not installed.
"""

from __future__ import annotations

import torch
from torch import nn

from workbench.compress.quantize import quantize, torchao_available, unsupported_reason
from workbench.compress.stats import output_error
from workbench.compress.structured import layer_widths, structured_prune
from workbench.measure.ratios import paired_ratio
from workbench.trials.calls import timed_calls
from workbench.train.models import MLP

ROUNDS = 12  # interleaved rounds per comparison (6 is the fewest with a 95 % interval)
SPARSE_BATCH, SPARSE_IN, SPARSE_HIDDEN = 8192, 8192, 32768
MLP_BATCH, MLP_WIDTH = 8192, 4096
SMALL_BATCH = 16  # weight-only int8: where reading the weights, not the math, sets the time


def timed(ctx, models: dict, x: torch.Tensor) -> dict:
    fns = {name: (lambda m=m: m(x)) for name, m in models.items()}
    with torch.inference_mode():
        return timed_calls(fns, device=ctx.device, warmup=3, rounds=ROUNDS)


def against(reference, timing, flops: float | None = None) -> dict:
    """The variant's speed over the reference's, round by round, and both medians."""
    r = paired_ratio(reference.samples_ms, timing.samples_ms)
    out = {
        **r.as_dict("speedup"),
        "speedup_label": r.label(),
        "median_ms": timing.median_ms,
        "reference_median_ms": reference.median_ms,
        "rounds": ROUNDS,
        "threads": torch.get_num_threads(),
    }
    if flops:
        out["reference_tflops"] = round(flops / reference.median_ms / 1e9, 2)
    return out


def sparse_2_4(ctx, rec) -> None:
    names = ("2:4 semi-structured", "2:4 semi-structured (CUTLASS)")
    reason = unsupported_reason("semi_structured_2_4", ctx.device)
    if reason:
        for n in names:
            rec.item(n, "skipped", reason=reason)
        return
    from torch.sparse import SparseSemiStructuredTensor

    torch.manual_seed(0)
    dense = nn.Sequential(
        nn.Linear(SPARSE_IN, SPARSE_HIDDEN, bias=False),
        nn.ReLU(),
        nn.Linear(SPARSE_HIDDEN, SPARSE_IN, bias=False),
    ).to(ctx.device, torch.float16)
    sparse, info = quantize(dense, "semi_structured_2_4", device=ctx.device)
    same_weights = nn.Sequential(
        *[
            nn.Linear(m.in_features, m.out_features, bias=False, device="meta")
            if isinstance(m, nn.Linear)
            else m
            for m in sparse
        ]
    )
    for mine, theirs in zip(same_weights, sparse):
        if isinstance(mine, nn.Linear):  # the 2:4 pattern as a dense tensor: the fair reference
            mine.weight = nn.Parameter(theirs.weight.to_dense(), requires_grad=False)
    models = {"dense": same_weights.to(ctx.device).eval(), names[0]: sparse}
    cusparselt = getattr(torch.backends, "cusparselt", None)
    default_cutlass = SparseSemiStructuredTensor._FORCE_CUTLASS or not (
        cusparselt is not None and cusparselt.is_available()
    )
    if not default_cutlass:
        SparseSemiStructuredTensor._FORCE_CUTLASS = True
        try:
            models[names[1]] = quantize(dense, "semi_structured_2_4", device=ctx.device)[0]
        finally:
            SparseSemiStructuredTensor._FORCE_CUTLASS = False
    x = torch.randn(SPARSE_BATCH, SPARSE_IN, device=ctx.device, dtype=torch.float16)
    with torch.inference_mode():
        error = output_error(models["dense"], sparse, x)
    t = timed(ctx, models, x)
    flops = 2 * 2 * SPARSE_BATCH * SPARSE_IN * SPARSE_HIDDEN
    shape = {"batch": SPARSE_BATCH, "widths": [SPARSE_IN, SPARSE_HIDDEN, SPARSE_IN], "dtype": "fp16"}
    for name in names:
        if name not in models:
            rec.item(name, "skipped", reason="torch already uses CUTLASS for 2:4 here (no cuSPARSELt)")
            continue
        kernel = type(models[name][0].weight).__name__
        fields = {
            **against(t["dense"], t[name], flops),
            **shape,
            "tensor_type": kernel,
            "converted": f"{info['converted']}/{info['linear_layers']}",
        }
        if name == names[0]:
            fields["output_error"] = round(error, 6)
        ok = name != names[0] or error < 1e-2
        rec.item(
            name,
            "ok" if ok else "failed",
            **fields,
            **({} if ok else {"reason": f"2:4 outputs differ from the dense model's by {error:.3g}"}),
        )


def structured(ctx, rec) -> None:
    torch.manual_seed(0)
    dense = MLP(MLP_WIDTH, 1000, width=MLP_WIDTH, depth=3).eval()
    small = structured_prune(dense, 0.5)
    params = [sum(p.numel() for p in m.parameters()) for m in (dense, small)]
    models = {"dense": dense.to(ctx.device, torch.bfloat16), "pruned": small.to(ctx.device, torch.bfloat16)}
    x = torch.randn(MLP_BATCH, MLP_WIDTH, device=ctx.device, dtype=torch.bfloat16)
    t = timed(ctx, models, x)
    rec.item(
        "structured pruning 50 %",
        "ok",
        **against(t["dense"], t["pruned"]),
        batch=MLP_BATCH,
        dtype="bf16",
        widths_before=layer_widths(dense),
        widths_after=layer_widths(small),
        params_kept=round(params[1] / params[0], 4),
    )


def int8(ctx, rec) -> None:
    names = ("int8 dynamic (torchao)", "int8 weight-only (torchao)")
    if not torchao_available():
        for n in names:
            rec.item(n, "skipped", reason=unsupported_reason("weight_only_int8", ctx.device))
        return
    torch.manual_seed(0)
    dense = (
        nn.Sequential(
            nn.Linear(MLP_WIDTH, MLP_WIDTH),
            nn.ReLU(),
            nn.Linear(MLP_WIDTH, MLP_WIDTH),
            nn.ReLU(),
            nn.Linear(MLP_WIDTH, MLP_WIDTH),
        )
        .to(ctx.device, torch.bfloat16)
        .eval()
    )
    for name, method, batch in (
        (names[0], "dynamic_int8", MLP_BATCH),
        (names[1], "weight_only_int8", SMALL_BATCH),
    ):
        try:
            q, info = quantize(dense, method, backend="torchao", device=ctx.device)
            x = torch.randn(batch, MLP_WIDTH, device=ctx.device, dtype=torch.bfloat16)
            t = timed(ctx, {"dense": dense, name: q}, x)
        except Exception as e:  # noqa: BLE001 - one torchao path failing leaves the other
            rec.item(name, "failed", reason=f"{type(e).__name__}: {e}"[:400])
            continue
        rec.item(
            name,
            "ok",
            **against(t["dense"], t[name]),
            batch=batch,
            reference="bf16",
            converted=f"{info['converted']}/{info['linear_layers']}",
            notes=info["notes"],
        )


def run(ctx, rec) -> None:
    ctx.each(
        rec,
        (
            ("2:4 semi-structured", sparse_2_4),
            ("structured pruning 50 %", structured),
            ("int8 (torchao)", int8),
        ),
    )
    rec.summary = "; ".join(f"{i['name']} {i.get('speedup_label') or i['status']}" for i in rec.items)
