"""Where a training step's time and memory go, run from the kernel or the CLI: a few profiled steps
of any run config in a real worker (`run.profile_steps`), read back from the run folder as a
breakdown per phase and rank with a "bound by" verdict, a memory breakdown beside the chooser's
estimate, and the activation-checkpointing and optimizer-implementation trades, measured with the
measurement core. May import the base, machine/, train/, distributed/ and the other labs; the faces
and the notebooks import it."""
