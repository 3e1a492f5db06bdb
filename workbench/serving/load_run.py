"""A load run's folder: `workbench load` records what it measured the way a training run does, so
`workbench runs`, `compare`, the charts and the sinks read it as they read any run.

    run = LoadRun.open(health, settings, run_dir=None)   # once the server has said what it is
    run.window(record)                                    # each measured second of a level
    run.close(report)                                     # load.json, then the summary

Its steps are the measured seconds (serving.load_generator.WINDOW_S): a step's samples are the
requests answered in it, so samples_per_s is the throughput, and each step carries that second's
p50, p90 and p99 latency (ms), its refusals and failures, and its level (concurrency or rate_rps).
Warm-up seconds are left out, as a training run leaves out its warm-up steps. The folder is a
tracked script's (script.json, rank0.jsonl, summary.json) and its per-level report is load.json.
"""

from __future__ import annotations

from pathlib import Path

from ..disk import write_json_atomic
from ..runfolder import RunFolder


class LoadRun:
    def __init__(self, run):
        self.run = run  # a workbench.tracking Run

    @property
    def dir(self) -> Path:
        return Path(self.run.dir)

    @classmethod
    def open(cls, health: dict, settings: dict, run_dir=None) -> "LoadRun":
        """A run folder for a load of the server that answered `health`; `settings` are the
        load's own (url, levels, seconds), recorded as a script's settings are."""
        import torch

        from ..tracking import track

        torch.set_num_threads(1)  # the client computes nothing with torch: no threads to spin
        run = track(
            config={**settings, "server": {k: health.get(k) for k in ("model", "variant", "batching")}},
            run_dir=run_dir,
            label="load",
            model=str(health.get("model")),
            precision=f"served {health.get('variant')}",
            batch_size=1,  # a request is one sample
        )
        if isinstance(health.get("pid"), int):
            run.count_as_own(health["pid"])  # a server on this machine is the measured work
        return cls(run)

    def window(self, record: dict) -> None:
        figures = {f"p{q}_ms": record[f"p{q}_ms"] for q in (50, 90, 99)}
        level = "concurrency" if record["kind"] == "concurrency" else "rate_rps"
        self.run.add_step(
            record["seconds"],
            samples=record["answered"],
            refused=record["refused"],
            failed=record["failed"],
            **{level: record["value"]},
            **figures,
        )

    def close(self, report: dict, failed: int, causes: list[str]) -> None:
        """The per-level report beside the events, then how the run ended: failed when any
        request got no answer, naming why."""
        try:
            write_json_atomic(RunFolder(self.dir).load_report_file, report)
        except OSError:
            pass  # the summary below may still fit; the report was printed
        if failed:
            self.run.finish(
                "failed", message=f"{failed} request(s) got no answer: {', '.join(causes)}", returncode=1
            )
        else:
            self.run.finish()

    def end(self, error: BaseException) -> None:
        """An interrupted or crashed load keeps its events and says how it ended."""
        self.run.end(error)
