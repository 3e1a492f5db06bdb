"""What a table's column is called where a person reads it: words with their units, not the field
names the data carries (`samples_per_s` stays the key in JSON and DataFrames; the page says
"samples/s"). One table of titles for every table the widgets draw."""
from __future__ import annotations

from ..events import SAMPLES_PER_S, STEP_TIME_MS

TITLES = {
    SAMPLES_PER_S: "samples/s", STEP_TIME_MS: "step (ms)", "step_time_ms_median": "step (ms)",
    "peak_mem_gib": "peak memory (GiB)", "mem_held_gib": "held by rank 0 (GiB)",
    "final_loss": "final loss", "eval_accuracy": "accuracy", "other_cpu_cores": "others' cores",
    "gain_vs_prev": "gain over the step before", "gain_vs_baseline": "gain over the baseline",
    "rounds": "pairs", "dropped": "pairs dropped", "size_mib": "size (MiB)",
    "latency_ms": "latency (ms)", "run_dir": "run folder",
    "samples_per_s_spread": "spread (p10-p90 / median)", "speedup_vs_0_workers": "over 0 workers",
    "first_batch_ms_epoch1": "first batch, epoch 1 (ms)",
    "first_batch_ms_epoch2": "first batch, epoch 2 (ms)",
    "data_wait_frac": "share of time waiting for data", "seconds": "seconds to the first step",
    "warm_worker": "spare took it", "cold_because": "why it started cold",
}


def title(column) -> str:
    """The column's title on a page: its words and unit, or its own name when it has none."""
    return TITLES.get(str(column), str(column))
