"""The profiling lab's widgets: a real profile on the lab's thread fills the stacked phase bars, the
memory bars, the verdict and the operator table; a bad setting shows in the status and is raised by
wait(); the run panel's "profile this config" button profiles the panel's config."""

from __future__ import annotations

import pytest

from workbench.config import ConfigError, RunConfig
from workbench.train.profiling import PHASES

ui = pytest.importorskip("workbench.ui.profile_view")


def test_the_lab_profiles_on_a_thread_and_draws(runs_root):
    lab = ui.ProfileLab(RunConfig.smoke().replace(**{"run.threads": 1}), profile_steps=2)
    assert lab.start()
    b = lab.wait(timeout=300)
    assert lab.breakdown is b and "bound by" in lab.status.value
    bars = {t.name: t for t in lab.phases.data}
    assert len(lab.phases.data) == len(PHASES)
    assert list(bars["forward (and loss)"].x) == [pytest.approx(b.ranks[0].phases_ms["forward"])]
    assert list(bars["backward"].y) == ["rank 0"]
    assert f"{b.step_ms:.1f} ms" in lab.phases.layout.title.text
    parts = {t.name: list(t.y) for t in lab.memory.data}
    assert parts["parameters"][0] == pytest.approx(b.memory.bytes["parameters"] / 2**20)
    assert len(parts["activations"]) == 2  # measured and the chooser's estimate side by side
    assert "aten::" in lab.ops.value and "bound by" in lab.verdict.value


def test_a_bad_setting_shows_in_the_status_and_is_raised():
    lab = ui.ProfileLab(RunConfig.smoke(), profile_steps=0)
    lab.start()
    with pytest.raises(ConfigError, match="profile_steps must be an integer >= 1"):
        lab.wait(timeout=60)
    assert "error: profile_steps" in lab.status.value and not lab.profile_button.disabled


def test_the_panel_button_profiles_the_panel_config(monkeypatch):
    from workbench.ui import RunPanel

    started = []
    monkeypatch.setattr(ui.ProfileLab, "start", lambda self, cfg=None: started.append(cfg) or True)
    panel = RunPanel(RunConfig.smoke())
    try:
        assert panel.profile_box.children == ()
        panel.profile_button.click()
        assert started == [panel.config()]
        assert panel.profile_box.children == (panel.profile_lab.widget,)
        panel.profile_button.click()  # the same lab again, with the controls' current config
        assert len(started) == 2 and panel.profile_box.children == (panel.profile_lab.widget,)
    finally:
        panel.close()
