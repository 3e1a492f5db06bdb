"""Part "training": the built-in transformer and CNN trained on the GPU through the real launcher and
worker in fp32, TF32, bf16 and fp16 (with GradScaler and its AMP health figures), channels_last on the
CNN, and torch.compile default and reduce-overhead. Each run reports samples/s, peak device memory
from the allocator (the run's summary) and from NVML (sampled while it ran), and MFU against the
measured and the datasheet peak.

bf16 against fp32 on the transformer is the headline: ROUNDS interleaved rounds (fp32 bf16, bf16
fp32, ...), the fewest that carry a 95 % interval, of TRANSFORMER_STEPS steps each. Every other
setting is one run, compared with its reference run step by step (unpaired, which its note says), so
that the whole part fits its time limit. A setting the GPU cannot do is skipped with the reason.
"""

from __future__ import annotations

import statistics

from workbench.config import ConfigError, DataConfig, LoaderConfig, ModelConfig, RunConfig, RunSection
from workbench.distributed.launch import check_launch
from workbench.distributed.launch import run as launch_run
from workbench.events import (
    EVENT,
    GRAD_SCALE,
    MEM_PEAK_GIB,
    MEM_RESERVED_GIB,
    MFU,
    NONFINITE_LOSSES,
    RANK,
    SAMPLES_PER_S,
    SKIPPED_STEPS,
    STEP,
    STEP_TIME_MS,
    TFLOPS,
    TIME,
    read_events,
)
from workbench.measure.ratios import min_rounds, paired_speed_ratio, unpaired_ratio
from workbench.measure.warmup import warmup_steps
from tools.rounds import contention_of, run_rounds, speed_config
from .gpumem import DeviceMemory, Sampler

ROUNDS = min_rounds()  # 6 at 95 %
WIDTH, DEPTH, HEADS, SEQ = 2048, 4, 16, 1024  # large enough that matmuls, not launches, set the pace
TRANSFORMER_STEPS = 20
FP32_STEP_S = 0.2  # the fp32 step the transformer's batch is sized for: 2 x ROUNDS runs must fit
MAX_BATCH = 8
CNN_STEPS = 40
RUN_S, COMPILE_S = 20.0, 75.0  # seconds budgeted per run, start-up included; less left: skipped
SINGLES = [  # name, model, changes, the reference it is compared with, seconds budgeted
    ("cnn fp32", "cnn", {}, None, RUN_S),
    ("cnn bf16", "cnn", {"precision.dtype": "bf16"}, "cnn fp32", RUN_S),
    (
        "cnn bf16 channels_last",
        "cnn",
        {"precision.dtype": "bf16", "precision.channels_last": True},
        "cnn bf16",
        RUN_S,
    ),
    (
        "cnn bf16 compile default",
        "cnn",
        {"precision.dtype": "bf16", "compile.enabled": True},
        "cnn bf16",
        COMPILE_S,
    ),
    (
        "cnn bf16 compile reduce-overhead",
        "cnn",
        {"precision.dtype": "bf16", "compile.enabled": True, "compile.mode": "reduce-overhead"},
        "cnn bf16",
        COMPILE_S,
    ),
    ("transformer fp16", "transformer", {"precision.dtype": "fp16"}, "transformer fp32", RUN_S),
    ("cnn fp16", "cnn", {"precision.dtype": "fp16"}, "cnn fp32", RUN_S),
    ("transformer tf32", "transformer", {"precision.tf32": True}, "transformer fp32", RUN_S),
    ("cnn tf32", "cnn", {"precision.tf32": True}, "cnn fp32", RUN_S),
]
ROW = (
    SAMPLES_PER_S,
    "step_time_ms_median",
    "step_time_ms_p10",
    "step_time_ms_p90",
    "threads",
    "precision",
    TFLOPS,
    "flops_per_step",
    MFU,
    "mfu_basis",
    "mfu_spec",
    "mfu_measured",
    "peak_tflops",
    "spec_tflops",
    "measured_tflops",
    "mfu_error",
    MEM_PEAK_GIB,
    MEM_RESERVED_GIB,
    "time_to_first_step_s",
    "wall_s",
    "data_wait_frac",
    "final_loss",
    SKIPPED_STEPS,
    GRAD_SCALE,
    NONFINITE_LOSSES,
    "contention",
)


def transformer_flops_per_sample() -> float:
    """Forward and backward of one sequence: 6 x parameters x tokens, plus attention's scores."""
    params = 12 * WIDTH**2 * DEPTH
    return 6 * params * SEQ + 12 * SEQ**2 * WIDTH * DEPTH


def transformer_batch(fp32_gflops: float | None) -> int:
    """A batch whose fp32 step takes about FP32_STEP_S on this GPU's measured fp32 matmul ceiling."""
    if not fp32_gflops:
        return MAX_BATCH
    return max(1, min(MAX_BATCH, int(FP32_STEP_S * fp32_gflops * 1e9 / transformer_flops_per_sample())))


def base_config(model: str, batch: int = MAX_BATCH) -> RunConfig:
    run = dict(device="cuda", eval_batches=0, save_weights=False, mem_every_s=0.25)
    if model == "transformer":
        return RunConfig(
            model=ModelConfig("transformer", width=WIDTH, depth=DEPTH, heads=HEADS),
            data=DataConfig(name="text", seq_len=SEQ, num_samples=256),
            loader=LoaderConfig(batch_size=batch),
            run=RunSection(steps=TRANSFORMER_STEPS, **run),
        )
    return RunConfig(
        model=ModelConfig("cnn", width=256, depth=4),
        data=DataConfig(name="synthetic_images", image_size=64, num_samples=2048),
        loader=LoaderConfig(batch_size=256),
        run=RunSection(steps=CNN_STEPS, **run),
    )


def refusal(cfg: RunConfig) -> str | None:
    """Why the launcher would refuse this config on this GPU (the one capability rule), or None."""
    try:
        check_launch(cfg)
    except ConfigError as e:
        return str(e)
    return None


def run_records(run_dir) -> list[dict]:
    return [r for r in read_events(run_dir) if r.get(RANK, 0) == 0]


def step_times_ms(run_dir) -> list[float]:
    """Rank 0's step times after warm-up, as the summary's figures count them."""
    times = [r[STEP_TIME_MS] for r in run_records(run_dir) if r.get(EVENT) == STEP]
    return times[warmup_steps(len(times)) :]


def row_of(summary: dict, sampler: Sampler | None = None, baseline_gib: float | None = None) -> dict:
    """A run's figures: its summary's, and NVML's peak while it ran (over the part's baseline too)."""
    row = {k: summary[k] for k in ROW if k in summary}
    row.update(run_status=summary.get("status"), run_dir=summary.get("run_dir"))
    if sampler is not None and summary.get("run_dir"):
        ts = [r[TIME] for r in run_records(summary["run_dir"]) if TIME in r]
        row.update(sampler.window(min(ts), max(ts)) if ts else sampler.window(0, 0))
        if row.get("nvml_peak_gib") is not None and baseline_gib is not None:
            row["nvml_added_gib"] = round(row["nvml_peak_gib"] - baseline_gib, 3)
    return row


def median_row(rows: list[dict]) -> dict:
    """Rows of the same config from several rounds: numbers as medians, the rest from the first."""
    out = dict(rows[0])
    for k in rows[0]:
        values = [r[k] for r in rows if isinstance(r.get(k), (int, float)) and not isinstance(r[k], bool)]
        if values and len(values) == len(rows):
            out[k] = statistics.median(values)
    out["rounds"] = len(rows)
    out["samples_per_s_rounds"] = [r.get(SAMPLES_PER_S) for r in rows]
    out["run_dirs"] = [r.get("run_dir") for r in rows]
    return out


def ratio_fields(ratio) -> dict:
    return {**ratio.as_dict("speedup"), "speedup_label": ratio.label()}


class Runs:
    """What the part's runs share: the NVML sampler and its baseline, every run's row (for the noise
    figure), and each setting's step times, which later settings are compared with."""

    def __init__(self, ctx, sampler: Sampler | None, baseline_gib: float | None):
        self.ctx, self.sampler, self.baseline = ctx, sampler, baseline_gib
        self.rows: list[dict] = []
        self.steps: dict[str, list] = {}

    def add(self, name: str, summary: dict) -> dict:
        row = row_of(summary, self.sampler, self.baseline)
        self.rows.append(row)
        if summary.get("status") == "completed":
            self.steps.setdefault(name, []).extend(step_times_ms(summary["run_dir"]))
        mfu = row.get("mfu_spec")
        self.ctx.log(
            f"[training] {name}: {row.get(SAMPLES_PER_S) or 0:,.0f} samples/s"
            + (f", MFU {mfu:.1%} of the datasheet" if mfu is not None else "")
            + f" ({row.get('run_status')})"
        )
        return row


def ab_bf16_fp32(rec, runs: Runs, batch: int) -> None:
    """The transformer in fp32 and bf16, interleaved rounds: an item for each and one for the ratio."""
    fp32 = base_config("transformer", batch)
    configs = {"fp32": fp32, "bf16": fp32.replace(**{"precision.dtype": "bf16"})}
    reason = refusal(configs["bf16"])
    if reason:
        rec.item("transformer bf16 vs fp32", "skipped", reason=reason)
        return
    rows: dict[str, list] = {"fp32": [], "bf16": []}

    def on_run(label, r, summary):
        rows[label].append(runs.add(f"transformer {label}", summary))

    outcome = ("failed", "stopped by the part's time limit")
    try:
        run_rounds(configs, ROUNDS, timeout_s=max(runs.ctx.left() - 2, 5), on_run=on_run)
        outcome = ("ok", "")
    except ConfigError as e:
        outcome = ("failed", str(e))
    finally:  # also when the time limit cuts the rounds short: what ran is reported
        for label, got in rows.items():
            if got:
                rec.item(
                    f"transformer {label}", "ok", batch=batch, steps=TRANSFORMER_STEPS, **median_row(got)
                )
        n = min(len(rows["fp32"]), len(rows["bf16"]))
        ratio = paired_speed_ratio(
            [r[SAMPLES_PER_S] for r in rows["fp32"][:n]], [r[SAMPLES_PER_S] for r in rows["bf16"][:n]]
        )
        rec.item(
            "transformer bf16 vs fp32",
            outcome[0],
            **ratio_fields(ratio),
            **({"reason": outcome[1]} if outcome[1] else {}),
            batch=batch,
            steps=TRANSFORMER_STEPS,
            note=f"{n} interleaved rounds of {TRANSFORMER_STEPS} steps "
            f"each ({ROUNDS} is the fewest that carry a 95 % interval), to fit the time limit",
        )


def single(rec, runs: Runs, name: str, cfg: RunConfig, reference: str | None, budget_s: float) -> None:
    """One run of one setting, compared step by step with its reference run."""
    left = runs.ctx.left()
    reason = refusal(cfg)
    if reason is None and left < budget_s:
        reason = f"not enough time left: {left:.0f} s of the part's limit, {budget_s:.0f} s budgeted"
    if reason:
        rec.item(name, "skipped", reason=reason)
        return
    summary = launch_run(speed_config(cfg, name.replace(" ", "-")), timeout_s=max(left - 2, 5))
    row = runs.add(name, summary)
    if summary.get("status") != "completed":
        rec.item(
            name,
            "failed",
            reason=f"the run ended {summary.get('status')}: {summary.get('message', '')}"[:400],
            **row,
        )
        return
    compared = {}
    if reference:
        ref = runs.steps.get(reference)
        compared = {
            "vs": reference,
            **(
                ratio_fields(unpaired_ratio(ref, runs.steps[name]))
                if ref
                else {"speedup_note": f"{reference} was not measured"}
            ),
        }
    rec.item(name, "ok", **row, **compared)


def run(ctx, rec) -> None:
    mem = DeviceMemory(ctx.device.index)
    baseline = mem.used_gib()
    fp32_gflops = ctx.shared.get("ceilings", {}).get("matmul fp32")
    batch = transformer_batch(fp32_gflops if fp32_gflops == fp32_gflops else None)
    rec.figures.update(
        nvml_baseline_gib=baseline,
        nvml_note=mem.note,
        transformer_batch=batch,
        rounds=ROUNDS,
        transformer=dict(width=WIDTH, depth=DEPTH, heads=HEADS, seq_len=SEQ, steps=TRANSFORMER_STEPS),
    )
    with Sampler(mem) as sampler:
        runs = Runs(ctx, sampler, baseline)
        try:
            ab_bf16_fp32(rec, runs, batch)
            plan = list(SINGLES)
            if "transformer fp32" not in runs.steps:  # no rounds ran: the reference runs alone
                plan.insert(0, ("transformer fp32", "transformer", {}, None, RUN_S))
            for name, model, changes, reference, budget_s in plan:
                single(rec, runs, name, base_config(model, batch).replace(**changes), reference, budget_s)
        finally:
            rec.figures["contention"] = contention_of(runs.rows)
    ab = next((i for i in rec.items if i["name"] == "transformer bf16 vs fp32"), {})
    bf16 = next((i for i in rec.items if i["name"] == "transformer bf16"), {})
    done = sum(i["status"] == "ok" for i in rec.items)
    rec.summary = (
        f"bf16 vs fp32 {ab.get('speedup_label') or ab.get('reason', 'not run')}"
        + (f"; bf16 MFU {bf16['mfu_spec']:.0%} of datasheet" if bf16.get("mfu_spec") else "")
        + f"; {done} of {len(rec.items)} items ok"
    )
