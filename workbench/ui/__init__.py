"""The faces in a notebook: widgets and live charts, run in the kernel, the only code that imports
ipywidgets or plotly. May import every folder below it; only the notebooks and the
benchmarks (tools/bench) import it.

    from workbench.ui import RunPanel, LiveDashboard, compare_view, attach

`RunPanel(cfg)`
    The control panel bound to a RunConfig: precision (fp32/bf16/fp16), device, model, batch size,
    steps, learning rate, and TF32 / channels_last / compile toggles (what the device cannot do
    is disabled with a tooltip saying why), a recommendation line, Run and Stop, a progress bar
    and status line, the live dashboard, a system monitor (CPU via psutil, GPU via NVML, ~1 Hz
    while a run goes) and a table of the runs made from it.
    `.widget` (display it, or just end a cell with the panel), `.run(wait=False, **settings)`
    presses Run from code (settings: precision, device, model, batch_size, steps, budget_s, lr, tf32,
    channels_last, compile), `.stop()`, `.wait(timeout)`, `.handle` (the RunHandle of the
    latest run), `.run_dirs` (every run it made), `.close()`.

`LiveDashboard(run_dir=None, world_size=1, total_steps=None, max_redraws_per_s=4.0)`
    Live charts of one run: loss, samples/s (one trace per rank plus the total), step time and
    memory (device memory on a GPU, RSS on a CPU), and a readout line: step, samples/s, the
    share of time spent waiting for data (from data_wait_ms / step_time_ms), MFU when step
    records carry `mfu` (a fraction of peak), and AMP health for fp16 (grad scale, skipped
    steps, non-finite losses). Redraws happen inside `fig.batch_update()` at most
    `max_redraws_per_s` times a second, whatever the step rate. A stopped or failed run shows as
    such in the status and the chart titles.
    `.widget`, `.start()`, `.stop()`, `.wait(timeout)`, `.watch(run_dir, world_size,
    total_steps)` to switch runs, `.feed(records)` + `.maybe_redraw()` to drive it by hand,
    `.series` (the data drawn), `.charts.figures`, `.redraws`, `.on_update(cb)`, `.on_finish(cb)`.

`attach(run_dir)`
    A started LiveDashboard on any run folder: watch a run launched elsewhere (the CLI, another
    notebook) while it goes, or replay a finished one.

`compare_view(run_dirs=(), root=None, picker=True)`
    Pick runs from the run store; their loss and throughput curves overlaid, and the table of
    `workbench.runstore.compare` (speedup vs the first run, peak memory, final loss, accuracy).
    Returns a CompareView: `.widget`, `.frame` (the DataFrame), `.refresh(run_dirs)`, `.add()`.

Names are imported lazily, so `workbench.ui.series` and friends stay cheap to import.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "RunPanel": "panel",
    "LiveDashboard": "dashboard",
    "attach": "attaching",
    "compare_view": "comparison_view",
    "CompareView": "comparison_view",
    "LiveCharts": "charts",
    "Controls": "controls",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'workbench.ui' has no attribute {name!r}")
