"""The pruning and quantization lab, run in the kernel or the CLI (inference-sized work): masks,
structured pruning, int8, sweeps, every variant side by side, and what each costs. May import the
base, machine/ and train/; stacking/ and the faces import it."""
