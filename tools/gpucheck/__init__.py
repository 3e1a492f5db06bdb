"""The GPU check, a face run from a terminal (`python -m tools.gpucheck`, `make gpu-check`): every
GPU path of the workbench in one command, each part with its own time limit and status, one report.
May import every folder below it; nothing imports it. Imports no Jupyter, plotly or pandas.

    python -m tools.gpucheck --out DIR          # DIR/gpucheck.json and a table at the end

Modules: `probe` (is there a GPU, answered before torch is imported), `runner` (part records, the
watchdog, the loop that continues past a failed part), `check` (the plan and the whole run), one
module per part (`ceilings`, `training`, `ddp`, `fsdp`, `monitor`, `compression`, `loading`),
`gpumem` (NVML's view of the device), `holder` (the second process the monitor part starts),
`goals` and `report` (the JSON report, its schema and the table).
"""
