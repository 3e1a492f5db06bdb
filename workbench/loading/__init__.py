"""The data loading lab: an on-disk image set, a loader sweep, a decoded cache and advice."""
