"""The hardware lab, run from the kernel or the CLI: the report, micro-benchmarks that measure the
ceilings, the roofline of a training step, and the GPU chooser. May import the base, machine/,
train/ and distributed/; the faces (ui, cli, bench) import it."""
