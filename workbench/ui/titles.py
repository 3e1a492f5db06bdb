"""What a table's column is called where a person reads it: words with their units, not the field
names the data carries (`samples_per_s` stays the key in JSON and DataFrames; the page says
"samples/s"). One table of titles for every table the widgets draw."""

from __future__ import annotations

from ..events import SAMPLES_PER_S, STEP_TIME_MS, TFLOPS

# Only the titles the unit rule below cannot derive from a field's name ("memory_gib" reads
# "memory (GiB)" by itself).
TITLES = {
    SAMPLES_PER_S: "samples/s",
    STEP_TIME_MS: "step (ms)",
    "step_time_ms_median": "step (ms)",
    "peak_mem_gib": "peak memory (GiB)",
    "mem_held_mib": "held by rank 0 (MiB)",
    "eval_accuracy": "accuracy",
    "other_cpu_cores": "others' cores",
    "gain_vs_prev": "gain over the config before it",
    "gain_vs_baseline": "gain over the baseline",
    "rounds": "pairs",
    "requests_per_s": "requests/s",
    "dropped": "pairs dropped",
    "run_dir": "run folder",
    "samples_per_s_spread": "spread (p10-p90 / median)",
    "speedup_vs_0_workers": "over 0 workers",
    "first_batch_ms_epoch1": "first batch, epoch 1 (ms)",
    "first_batch_ms_epoch2": "first batch, epoch 2 (ms)",
    "data_wait_frac": "share of time waiting for data",
    "seconds": "seconds to the first step",
    "warm_worker": "spare took it",
    "cold_because": "why it started cold",
    "skip_reason": "why not",
    "need_gib": "needs (GiB)",
    "size_ratio": "size, share of dense",
    "speedup_b1": "speedup, batch 1",
    "speedup_b64": "speedup, batch 64",
    "accuracy_finetuned": "accuracy after fine-tune",
    "device_ms_per_step": "device ms a step",
    "self_ms_per_step": "own ms a step",
    "calls_per_step": "calls a step",
    "vs_for_loop": "against the for-loop",
    "script_loss": "the script's loss",
    "workbench_loss": "the run's loss",
    "abs_diff": "difference",
    "total_threads": "threads in all",
}


UNITS = {
    "ms": "ms",
    "s": "s",
    "gib": "GiB",
    "mib": "MiB",
    "gb": "GB",
    "gbs": "GB/s",
    TFLOPS: "TFLOP/s",
    "gflops": "GFLOP/s",
    "bytes": "bytes",
    "frac": "share",
}


def title(column) -> str:
    """The column's title on a page: its words and unit ("fp32_tflops" reads "fp32 (TFLOP/s)"),
    from the table above where the field's name says less than it should."""
    name = str(column)
    if name in TITLES:
        return TITLES[name]
    words = name.split("_")
    unit = UNITS.get(words[-1]) if len(words) > 1 else None
    text = " ".join(words[:-1] if unit else words)
    return f"{text} ({unit})" if unit else text
