"""What `workbench serve --workers N` hands each worker: the command as typed, less the flags the
parent decides (the port, the worker count, its own lifeline)."""

from workbench.cli.serve import worker_argv
from workbench.serving.workers import Worker


def test_a_worker_gets_the_command_less_what_its_parent_decides():
    typed = ["serve", "RUN", "--workers", "3", "--port=0", "--variant", "int8", "--lifeline", "--port", "9"]
    assert worker_argv(typed) == ["RUN", "--variant", "int8"]
    assert worker_argv(["--workers=2", "--max-batch", "8"]) == ["--max-batch", "8"]
    assert worker_argv(["--load-seen", "0.500", "--workers", "2", "--load-seen=1"]) == []


def test_the_parents_choice_reaches_the_worker_whole():
    plan = Worker(
        1, "passive", "other processes held 1.2 of 2 cores: ...", fd=7, index=1, workers=2, parent=42
    )
    assert Worker.from_flag(plan.flag()) == plan
