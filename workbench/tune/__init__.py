"""Tune my model (a lab: the kernel or the CLI runs it): from a baseline config, try the settings
this machine can run one at a time against the best so far, keep a setting only when interleaved
rounds say it is faster by more than the minimum effect (and, for one that changes the numbers,
its loss stays close), and say why for every setting kept or dropped.

    search.py    the search itself, pure: rounds come from a measure (real runs, or the simulated
                 device of the calibration tests), so the same code is proven on both
"""
