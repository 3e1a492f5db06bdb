"""Event records written as a rank writes them, for tests that read a run's events without
starting one (the watchdog, the fault diagnosis)."""

from __future__ import annotations

from workbench.events import EventWriter


def write_events(run_dir, rank, *records, attempt=0):
    """Append (event, fields) records to rank `rank`'s file of attempt `attempt`."""
    w = EventWriter(run_dir, rank, attempt)
    for event, fields in records:
        w.write(event, **fields)
    w.close()
