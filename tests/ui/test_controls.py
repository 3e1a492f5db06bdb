"""The control panel's inputs: bound to RunConfig, unsupported choices disabled with a reason.
GPUs are faked by monkeypatching torch.cuda, as the hardware checks are."""

from __future__ import annotations

import re

import pytest
import torch

from workbench.config import ConfigError, RunConfig
from workbench.ui.choices import ChoiceButtons
from workbench.ui.controls import Controls


@pytest.fixture
def fake_gpu(monkeypatch):
    def install(capability=(8, 0), bf16=True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "FakeGPU")

    return install


def test_widgets_start_from_the_config_and_build_it_back():
    cfg = RunConfig.default().replace(**{"precision.dtype": "bf16", "run.steps": 77})
    c = Controls(cfg)
    assert c.precision.value == "bf16" and c.steps.value == 77
    c.set(precision="fp16", batch_size=16, lr=0.01, model="transformer")
    out = c.config()
    assert out.precision.dtype == "fp16" and out.loader.batch_size == 16
    assert out.optim.lr == 0.01 and out.run.steps == 77
    assert out.model.name == "transformer" and out.data.name == "text"  # data follows the model
    c.set(model="mlp")
    assert c.config().data.name == "digits"


def test_cpu_disables_tf32_and_cuda_with_reasons():
    c = Controls(RunConfig.smoke().replace(**{"run.device": "cpu"}))
    assert c.toggles["tf32"].disabled and "CUDA tensor-core mode" in c.toggles["tf32"].tooltip
    if not torch.cuda.is_available():
        assert c.device.buttons["cuda"].disabled
        assert "no CUDA GPU" in c.device.buttons["cuda"].tooltip
    with pytest.raises(ConfigError, match="tf32 cannot be turned on here: unavailable: TF32"):
        c.set(tf32=True)


def test_channels_last_follows_the_model():
    c = Controls(RunConfig.smoke().replace(**{"run.device": "cpu"}))
    assert c.toggles["channels_last"].disabled
    assert "image (4-D) tensors" in c.toggles["channels_last"].tooltip
    c.set(model="cnn")
    assert not c.toggles["channels_last"].disabled
    c.set(channels_last=True)
    assert c.config().precision.channels_last is True


def test_old_gpu_disables_bf16_and_tf32(fake_gpu):
    fake_gpu(capability=(7, 5), bf16=False)
    c = Controls(RunConfig.smoke().replace(**{"run.device": "cuda", "precision.dtype": "bf16"}))
    assert c.precision.buttons["bf16"].disabled
    assert "compute capability 7.5" in c.precision.buttons["bf16"].tooltip
    assert c.precision.value == "fp32"  # an unsupported choice is not kept
    assert c.toggles["tf32"].disabled and "Ampere" in c.toggles["tf32"].tooltip
    with pytest.raises(ValueError, match="'bf16' is not available here"):
        c.precision.value = "bf16"


def test_ampere_gpu_enables_everything(fake_gpu):
    fake_gpu(capability=(8, 0), bf16=True)
    c = Controls(RunConfig.smoke().replace(**{"run.device": "cuda"}))
    assert not c.precision.buttons["bf16"].disabled and not c.toggles["tf32"].disabled
    c.set(tf32=True, precision="bf16")
    assert c.config().precision.tf32 and c.config().run.device == "cuda"


def test_choice_buttons_act_as_one_choice():
    seen = []
    c = ChoiceButtons(["a", "b", "c"], "a")
    c.observe(seen.append)
    c.buttons["b"].value = True  # a click
    assert c.value == "b" and not c.buttons["a"].value and seen == ["b"]
    c.buttons["b"].value = False  # clicking the chosen one keeps it
    assert c.value == "b" and c.buttons["b"].value
    with pytest.raises(ConfigError, match="value='z' is not allowed: one of a, b, c"):
        c.value = "z"


def test_unknown_control_is_refused():
    with pytest.raises(ConfigError, match="unknown control 'colour'"):
        Controls(RunConfig.smoke()).set(colour="red")


@pytest.mark.parametrize(
    "values, field",
    [
        ({"batch_size": 0}, "loader.batch_size"),
        ({"steps": -3}, "run.steps"),
        ({"lr": 0.0}, "optim.lr"),
        ({"budget_s": -1}, "run.time_budget_s"),
        ({"batch_size": "abc"}, "batch_size='abc'"),
        ({"precision": "fp8"}, "precision='fp8'"),
        ({"model": "nope"}, "model='nope' is not allowed: one of mlp, cnn, transformer"),
        ({"steps": 5, "batch_size": 0}, "loader.batch_size"),
    ],
)
def test_a_setter_refuses_what_the_config_refuses_and_keeps_every_widget(values, field):
    """No clamping: a number box that took 0 for a batch size used to show 1 without a word."""
    c = Controls(RunConfig.smoke())
    before = c.config()
    with pytest.raises(ConfigError, match=f"^{re.escape(field)}") as refused:
        c.set(**values)
    assert "\n" not in str(refused.value)
    assert c.config() == before  # nothing half-set: the valid part of the call went back too


def test_sliders_refuse_a_value_out_of_range_instead_of_clamping_it():
    from workbench.compress.subject import Subject
    from workbench.ui.compress import CompressLab
    from workbench.ui.distributed import DistributedPanel

    panel = DistributedPanel(RunConfig.smoke())
    most = panel.nproc.max
    with pytest.raises(
        ConfigError,
        match=rf"^ranks={most + 1} is not allowed: 1 to {most} \(the "
        "ranks this machine runs",
    ):
        panel.nproc.value = most + 1
    with pytest.raises(ConfigError, match=f"^ranks={most + 1} is not allowed"):
        panel.apply(nproc=most + 1)
    with pytest.raises(ConfigError, match="^backend='mpi' is not allowed: one of auto, gloo, nccl$"):
        panel.apply(steps=5, backend="mpi")
    assert panel.steps.value == RunConfig.smoke().run.steps  # the call's valid part went back
    assert panel.nproc.value <= most and panel.config().distributed.nproc == panel.nproc.value
    lab = CompressLab(Subject.from_config(RunConfig.smoke()), big_batch=16, rounds=3)
    with pytest.raises(ConfigError, match=r"^variants at %=99 is not allowed: 0 to 95$"):
        lab.amount.value = 99
    assert lab.amount.value == 50
