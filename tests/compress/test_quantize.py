"""Quantization: what is converted, how much smaller, and each refusal with its reason."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.compress import quantize as qmod
from workbench.config import ConfigError
from workbench.compress.coverage import coverage_note
from workbench.compress.stats import output_error, state_size_bytes
from workbench.compress.subject import Subject
from workbench.train.models import MLP, TinyTransformerLM
from workbench.compress.quantize import quantize, unsupported_reason
from workbench.compress.prune_sweep import finetune


@pytest.fixture
def mlp():
    torch.manual_seed(0)
    return MLP(256, 10, width=256, depth=2).eval()


def test_dynamic_int8_converts_every_linear_and_shrinks_weights_about_4x(mlp):
    q, info = quantize(mlp, "dynamic_int8", backend="torch.ao")
    assert info["converted"] == info["linear_layers"] == 3 and info["skipped"] == []
    assert any("deprecated" in n for n in info["notes"])  # said once, in the record
    ratio = state_size_bytes(mlp) / state_size_bytes(q)
    print(f"dynamic int8 state dict: {ratio:.2f}x smaller (published: about 4x)")
    assert 3.3 < ratio < 4.1
    x = torch.rand(8, 256)
    assert output_error(mlp, q, x) < 0.05
    assert isinstance(mlp.net[1], nn.Linear)  # the float model is untouched


@pytest.mark.skipif(not qmod.torchao_available(), reason="torchao is not installed")
@pytest.mark.parametrize("method", ["dynamic_int8", "weight_only_int8"])
def test_torchao_backend(mlp, method):
    q, info = quantize(mlp, method, backend="torchao")
    assert info["backend"] == "torchao" and info["converted"] == 3
    assert output_error(mlp, q, torch.rand(4, 256)) < 0.05


def test_weight_only_needs_torchao(mlp, monkeypatch):
    monkeypatch.setattr(qmod, "torchao_available", lambda: False)
    for backend in ("auto", "torchao"):
        with pytest.raises(ConfigError, match="torchao is not installed"):
            quantize(mlp, "weight_only_int8", backend=backend)


def test_transformer_attention_projections_are_reported_as_skipped():
    torch.manual_seed(0)
    lm = TinyTransformerLM(vocab_size=20, seq_len=8, width=32, depth=1, heads=2).eval()
    q, info = quantize(lm, "dynamic_int8", backend="torch.ao")
    assert any("out_proj" in s for s in info["skipped"])
    assert any("fast path" in n for n in info["notes"])
    assert q(torch.randint(0, 20, (2, 8))).shape == (2, 8, 20)


def test_converting_zero_modules_is_an_error(mlp, monkeypatch):
    with pytest.raises(ConfigError, match="has no nn.Linear layer; nothing to quantize"):
        quantize(nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU()), "dynamic_int8")
    monkeypatch.setattr(qmod, "_converted", lambda model: [])
    with pytest.raises(ConfigError, match="converted 0 of 3 Linear layers"):
        quantize(mlp, "dynamic_int8")


def test_bad_method_backend_and_double_quantization(mlp):
    with pytest.raises(ConfigError, match="method must be one of dynamic_int8"):
        quantize(mlp, "int3")
    with pytest.raises(ConfigError, match="backend must be one of auto, torchao, torch.ao"):
        quantize(mlp, "dynamic_int8", backend="tensorrt")
    q, _ = quantize(mlp, "dynamic_int8")
    with pytest.raises(ConfigError, match="cannot quantize a quantized model"):
        quantize(q, "dynamic_int8")


def test_training_a_quantized_model_is_refused(mlp):
    q, _ = quantize(mlp, "dynamic_int8")
    subject = Subject(q, (256,))
    with pytest.raises(ConfigError, match="cannot train a quantized model"):
        finetune(q, subject, epochs=1)


def test_semi_structured_needs_a_gpu(mlp, monkeypatch):
    assert "CPU" in unsupported_reason("semi_structured_2_4", "cpu")
    with pytest.raises(ConfigError, match="semi_structured_2_4' cannot run here: 2:4 .* this is a CPU"):
        quantize(mlp, "semi_structured_2_4")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    assert "compute capability 8.0+, this GPU is 7.5" in unsupported_reason("semi_structured_2_4", "cuda")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert unsupported_reason("semi_structured_2_4", "cuda") is None
    assert "CPU only" in unsupported_reason("dynamic_int8", "cuda", "torch.ao")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="2:4 sparsity needs a CUDA GPU")
def test_semi_structured_on_gpu(mlp):
    if torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("needs compute capability 8.0+")
    q, info = quantize(mlp, "semi_structured_2_4", device="cuda")
    assert info["converted"] == 3
    assert q(torch.rand(64, 256, device="cuda").half()).shape == (64, 10)


MINE = """from torch import nn


def build(in_channels, num_classes, width=32):  # a model of one's own, as a user writes it
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, width), nn.ReLU(),
                         nn.Linear(width, num_classes))
"""


def test_quant_of_an_untrained_model_says_its_accuracy_means_nothing_in_text_and_json(tmp_path, capsys):
    """`workbench quant` of one's own model with no training: the note is in the JSON's top-level
    `accuracy_note` and at the end of the text table, as in the pruning sweep's."""
    import json

    from workbench.cli import main

    (tmp_path / "mine.py").write_text(MINE)
    common = ["quant", "--model", f"{tmp_path / 'mine.py'}:build", "--data", "digits", "--train-epochs", "0"]
    common += ["--batch-sizes", "8", "--rounds", "6", "--method", "dynamic_int8"]
    assert main([*common, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["trained"] is False and "accuracy" in report["accuracy_note"]
    assert main(common) == 0
    text = capsys.readouterr().out
    assert text.rstrip().splitlines()[-1] == report["accuracy_note"]


def test_quantization_counts_convolutions_and_says_the_result_is_partial(resnet):
    q, info = quantize(resnet, "dynamic_int8", backend="torch.ao")
    cov = info["coverage"]
    convs = [r for r in cov["layers_left"] if r["type"] == "Conv2d"]
    assert len(convs) == 9 and "static quantization with calibration data" in convs[0]["why"]
    assert cov["partial"] and cov["coverage"] < 0.05
    assert coverage_note(cov, "converted").startswith("partial: converted 1 layer holding")
    assert q(torch.rand(2, 3, 32, 32)).shape == (2, 10)
