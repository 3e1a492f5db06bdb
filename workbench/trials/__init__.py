"""Measured comparisons of training configs, run from the kernel or the CLI: configs run as short,
real runs in alternating rounds (A B, B A, ...), and the A/B test on top. May import the base,
machine/, train/ and distributed/; stacking/, the faces and the notebooks import it."""
