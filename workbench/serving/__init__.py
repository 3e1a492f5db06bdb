"""The serving lab: a model behind an HTTP server, and a load generator that says what its users
would wait.

    workbench serve RUN_DIR --max-batch 8 --max-wait-ms 5     # the server process
    workbench load http://127.0.0.1:8700 --concurrency 1,4,16  # the process that drives it

In the server process: `served.py` builds what is served (a run's trained weights, a file
factory, a variant of either) and checks each request against the model's input; `batching.py`
gathers concurrent requests into one forward; `app.py` is the HTTP face; `server.py` runs it. In
the process that drives it: `load_generator.py` sends the load, `latency.py` reads what it
measured, `side_by_side.py` compares servers through the trial engine, and `process.py` starts a
server in a process of its own. `bounds.py` holds the limits both sides check.
"""
