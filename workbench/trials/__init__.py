"""The trial engine and the comparisons on top of it, run from the kernel or the CLI: variants built
once in warm hosts (engine.py: the rounds and the pairs; hosts.py: training variants in warm
processes; calls.py: functions in this process), the A/B test and the scaling study, and the one
list of changes the stacking study, the tune and their widgets try (changes.py). May import
the base, machine/, train/ and distributed/; the other labs and the faces import it."""
