"""The stacking study, run from the kernel: changes applied one at a time, cumulatively, each step a
real training run (plan, study, waterfall; the changes are the trial engine's one list,
workbench.trials.changes, which the tune tries too), and the inference end (pruning and int8 on the
trained model). May import the base, machine/, train/, distributed/ and compress/; the faces import it."""
