"""What owns the ranks, run from the kernel or the CLI, the supervisor and the torchrun agent: the
launcher, supervisor, watchdog, fault diagnosis, the one torchrun argument builder, the one SLURM
template. May import the base, machine/ and train/; the labs and faces import it."""
