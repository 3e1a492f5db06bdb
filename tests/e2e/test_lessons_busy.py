"""The precision lesson is the same answer each time it is measured afresh, beside other work: the
lessons notebooks 01 and 04 read (the default model) and notebook 07 reads (the default
transformer, one thread), each measured twice with a fresh cache beside two busy processes."""

from __future__ import annotations

import pytest

from workbench.config import RunConfig
from workbench.hardware import lessons
from workbench.hardware.size_curve import SizeCurve
from workbench.measure import claims
from workbench.procs import OtherWork
from workbench.profile.presets import default_transformer


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.timeout(900)
def test_two_fresh_lessons_beside_two_busy_processes_give_the_same_answer(tmp_path, monkeypatch):
    # the answer comes from the model's own steps; the curve only explains it, and has its own tests
    monkeypatch.setattr(lessons, "size_curve", lambda device, threads=None: SizeCurve())
    models = {
        "01 and 04 (the default model)": RunConfig.default(),
        "07 (the default transformer)": default_transformer().replace(**{"run.threads": 1}),
    }
    said: dict[str, list] = {name: [] for name in models}
    with OtherWork(2) as busy:
        for attempt in range(2):
            for name, cfg in models.items():
                monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / f"cache-{attempt}"))  # fresh each time
                claims.clear()
                lesson = lessons.precision_lesson(cfg)
                assert all(c.holds for c in claims.made()), claims.made()
                said[name].append((lesson.answer, lesson.text))
        assert busy.alive()
    claims.clear()
    for name, (first, second) in said.items():
        assert first[0] == second[0], f"{name}: {first[1]}\n---\n{second[1]}"
