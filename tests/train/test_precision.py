"""Precision choices checked against the device, with the hardware faked (no GPU needed)."""

import pytest
import torch

from workbench.config import ConfigError, RunConfig
from workbench.machine.capability import resolve_device, unsupported_reason
from workbench.train.precision import autocast, check_supported, grad_scaler


@pytest.fixture
def fake_gpu(monkeypatch):
    """A CUDA device of a chosen compute capability, as torch would report it."""

    def make(capability, bf16):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
        return torch.device("cuda", 0)

    return make


def test_bf16_refused_on_a_pre_ampere_gpu(fake_gpu):
    device = fake_gpu((7, 0), bf16=False)  # V100
    cfg = RunConfig.smoke().replace(**{"precision.dtype": "bf16"})
    with pytest.raises(
        ConfigError,
        match=r"precision\.dtype cannot be 'bf16' on cuda: this GPU "
        r"\(compute capability 7\.0\) has no bf16",
    ):
        check_supported(cfg, device)
    check_supported(cfg.replace(**{"precision.dtype": "fp16"}), device)  # fp16 is fine there


def test_tf32_needs_ampere(fake_gpu):
    cfg = RunConfig.smoke().replace(**{"precision.tf32": True})
    with pytest.raises(
        ConfigError,
        match=r"precision\.tf32 cannot be True on cuda: TF32 needs "
        r"compute capability 8\.0",
    ):
        check_supported(cfg, fake_gpu((7, 5), bf16=False))
    check_supported(cfg, fake_gpu((9, 0), bf16=True))  # H100 / H200


def test_tf32_refused_on_cpu_and_channels_last_needs_images():
    cpu = torch.device("cpu")
    with pytest.raises(ConfigError, match=r"precision\.tf32 cannot be True on cpu"):
        check_supported(RunConfig.smoke().replace(**{"precision.tf32": True}), cpu)
    with pytest.raises(ConfigError, match=r"precision\.channels_last .*only changes image"):
        check_supported(RunConfig.smoke().replace(**{"precision.channels_last": True}), cpu)
    cnn = RunConfig.smoke().replace(**{"model.name": "cnn", "precision.channels_last": True})
    check_supported(cnn, cpu)


def test_cpu_allows_all_three_dtypes():
    for dtype in ("fp32", "bf16", "fp16"):
        cfg = RunConfig.smoke().replace(**{"precision.dtype": dtype})
        assert unsupported_reason(cfg, torch.device("cpu"), dtype) is None


def test_asking_for_cuda_without_a_gpu_is_an_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto").type == "cpu"
    with pytest.raises(ConfigError, match=r"run\.device must be 'cpu' or 'auto' on this machine, got 'cuda'"):
        resolve_device("cuda")


def test_autocast_really_lowers_precision_and_scaler_is_fp16_only():
    cpu = torch.device("cpu")
    layer = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8)
    for dtype, expected in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        cfg = RunConfig.smoke().replace(**{"precision.dtype": dtype})
        with autocast(cfg, cpu):
            assert layer(x).dtype == expected
        assert grad_scaler(cfg, cpu).is_enabled() == (dtype == "fp16")
