"""The hardware lab: what this machine is (report), what it can do (micro-benchmarks), how close a
training run gets (FLOPs and MFU), and which GPU would suit a model (a spec table and a chooser).

    workbench hw --bench --json
"""
