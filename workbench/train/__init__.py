"""What runs inside a rank: the worker, the training loop and its step, precision, the built-in
models and data, the factory loader, memory, heartbeat, FLOPs and MFU. Imports only the shared
base and machine/; never the launcher (distributed/). Labs and faces may import it."""
