"""The data loading lab, run from the kernel or the CLI: an on-disk image set, a loader sweep, a
decoded cache and advice. May import the base, machine/ and train/; the faces import it."""
