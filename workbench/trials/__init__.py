"""Measured comparisons of training configs, run from the kernel or the CLI: configs run as short,
real runs in alternating rounds (A B, B A, ...), the A/B test and the scaling study on top. May
import the base, machine/, train/ and distributed/; stacking/ and the faces import it."""
