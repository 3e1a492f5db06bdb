"""Callbacks that put a library's trainer in the workbench: one line added to a Hugging Face or a
Lightning script, and its run is tracked as any loop is (workbench.tracking).

    trainer = Trainer(..., callbacks=[workbench.integrations.hf.WorkbenchCallback()])
    trainer = L.Trainer(..., callbacks=[workbench.integrations.lightning.WorkbenchCallback()])

Each module imports its library; install it with `pip install 'workbench[hf]'` or
`'workbench[lightning]'`.
"""
