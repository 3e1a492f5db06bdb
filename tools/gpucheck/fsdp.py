"""Part "fsdp": FSDP2 on the GPU through the real launcher and worker, and each rank's memory
predicted before launch against what it measured.

- 1 rank: one process (FSDP shards nothing on one rank, so the rank holds what one process holds);
- 2 ranks over NCCL, one GPU each, when the machine has 2 or more; else skipped, saying why.

The model is the training part's transformer (its width, depth and sequence), a few steps in bf16
where the GPU has it. Each rank's parameter, gradient, optimizer and saved-activation bytes are
predicted before launch and measured during the run (`memory_per_rank`, workbench.train.trainer):
they must agree byte for byte. Each rank's peak, predicted (what it held once set up, plus its
steps' gradients, optimizer state, activations, gathered block and the reduce-scatter input FSDP
keeps of the block before) and measured (the allocator's), is reported with their ratio (the
goal: within 15 %).
"""

from __future__ import annotations

from dataclasses import asdict

import torch

from workbench.events import RANK, SAMPLES_PER_S
from workbench.machine.capability import unsupported_reason
from workbench.distributed.launch import run as launch_run
from workbench.train.sharding import MEMORY_PARTS, PEAK
from tools.rounds import speed_config
from .training import RUN_S, base_config, refusal

GIB = 2**30
BATCH, STEPS = 4, 6  # a few steps: the memory is what is measured, not the speed


def fsdp_config(nproc: int):
    cfg = base_config("transformer", BATCH)
    bf16 = unsupported_reason(cfg, torch.device("cuda"), "bf16") is None
    return cfg.replace(
        **{
            "run.steps": STEPS,
            "distributed.strategy": "fsdp",
            "distributed.nproc": nproc,
            "distributed.backend": "nccl" if nproc > 1 else "auto",
            "precision.dtype": "bf16" if bf16 else "fp32",
        }
    )


def rank_rows(per_rank: dict) -> list[dict]:
    """Each rank's predicted and measured parts, the parts that differ, and its peak predicted
    against measured."""
    rows = []
    for want, got in zip(per_rank["predicted"], per_rank["measured"]):
        peak, predicted = got.get(PEAK), want.get(PEAK)
        rows.append(
            {
                RANK: got[RANK],
                "predicted": {k: want.get(k) for k in MEMORY_PARTS},
                "measured": {k: got.get(k) for k in MEMORY_PARTS},
                "differs": [k for k in MEMORY_PARTS if want.get(k) is None or want.get(k) != got.get(k)],
                "predicted_peak_gib": None if predicted is None else round(predicted / GIB, 4),
                "peak_gib": None if peak is None else round(peak / GIB, 4),
                "peak_over_predicted": round(peak / predicted, 3) if peak and predicted else None,
            }
        )
    return rows


def item_name(nproc: int) -> str:
    return f"fsdp, {nproc} rank" + ("s" if nproc > 1 else "")


def fsdp_run(ctx, rec, nproc: int) -> None:
    name = item_name(nproc)
    gpus = torch.cuda.device_count()
    cfg = fsdp_config(nproc)
    left = ctx.left()
    reason = (
        f"{gpus} GPU(s) here: {nproc} FSDP ranks take one GPU each over NCCL"
        if gpus < nproc
        else refusal(cfg)
    )
    if reason is None and left < RUN_S:
        reason = f"not enough time left: {left:.0f} s of the part's limit, {RUN_S:.0f} s budgeted"
    if reason:
        rec.item(name, "skipped", reason=reason)
        return
    summary = launch_run(
        speed_config(cfg, name.replace(", ", "-").replace(" ", "-")), timeout_s=max(left - 2, 5)
    )
    fields = {
        "run_dir": summary.get("run_dir"),
        SAMPLES_PER_S: summary.get(SAMPLES_PER_S),
        "precision": cfg.precision.dtype,
    }
    per_rank = summary.get("memory_per_rank")
    if summary.get("status") != "completed" or not per_rank:
        why = (
            f"the run ended {summary.get('status')}: {summary.get('message', '')}"
            if summary.get("status") != "completed"
            else "the summary has no memory_per_rank"
        )
        rec.item(name, "failed", reason=why[:400], **fields)
        return
    rows = rank_rows(per_rank)
    wrong = [
        f"rank {r[RANK]} {k}: predicted {r['predicted'][k]}, measured {r['measured'][k]}"
        for r in rows
        for k in r["differs"]
    ]
    ctx.log(
        f"[fsdp] {name}: peak "
        + ", ".join(
            f"{r['peak_gib']} GiB ({r['peak_over_predicted']}x the predicted {r['predicted_peak_gib']} GiB)"
            for r in rows
        )
    )
    rec.item(
        name,
        "failed" if wrong else "ok",
        strategy=per_rank.get("strategy"),
        ranks=rows,
        not_measured=per_rank.get("not_measured"),
        not_predicted=per_rank.get("not_predicted"),
        **fields,
        **({"reason": "; ".join(wrong)[:400]} if wrong else {}),
    )


def run(ctx, rec) -> None:
    rec.figures.update(model=asdict(base_config("transformer", BATCH).model), batch=BATCH, steps=STEPS)
    ctx.each(rec, [(item_name(n), lambda c, r, n=n: fsdp_run(c, r, n)) for n in (1, 2)])
    said = []
    for i in rec.items:
        if i["status"] == "ok":
            said.append(
                f"{i['name']} peak/predicted " + ", ".join(f"{r['peak_over_predicted']}x" for r in i["ranks"])
            )
        else:
            said.append(f"{i['name']} {i['status']}")
    rec.summary = "; ".join(said)
