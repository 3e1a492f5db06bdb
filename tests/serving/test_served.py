"""What a server takes: a request is read against the model's input, and refused in one line
naming what was wrong; each variant answers with the model's outputs."""

from __future__ import annotations

import pytest
import torch

from workbench.compress.subject import Subject
from workbench.config import ConfigError, RunConfig
from workbench.serving.bounds import MAX_SAMPLES
from workbench.serving.served import BadRequest, build_served


@pytest.fixture(scope="module")
def digits():
    return Subject.from_config(RunConfig.smoke())


@pytest.fixture(scope="module")
def text():
    return Subject.from_config(
        RunConfig.smoke().replace(**{"model.name": "transformer", "data.name": "text"})
    )


def test_one_sample_or_a_list_of_them_is_read(digits):
    served = build_served(digits)
    sample = digits.example(1)[0].tolist()
    x, single = served.read({"inputs": sample})
    assert single and tuple(x.shape) == (1, *digits.input_shape)
    x, single = served.read({"inputs": [sample, sample, sample]})
    assert not single and x.shape[0] == 3
    assert served.forward(x).shape == (3, 10)


@pytest.mark.parametrize(
    "body, status, words",
    [
        ([1, 2], 422, 'a JSON object with "inputs"'),
        ({"input": [1]}, 422, 'a JSON object with "inputs"'),
        ({"inputs": [1, 2]}, 422, "inputs has shape [2]; this model takes [1, 8, 8]"),
        ({"inputs": [[1, 2], [3]]}, 422, "not a rectangular array of numbers"),
        ({"inputs": "hello"}, 422, "not a rectangular array"),
        ({"inputs": [[[float("nan")] * 8] * 8]}, 422, "NaN or infinite"),
        ({"inputs": [[[[0.5] * 8] * 8]] * (MAX_SAMPLES + 1)}, 413, f"at most {MAX_SAMPLES} per request"),
        ({"inputs": []}, 422, "inputs has shape [0]"),
    ],
)
def test_a_request_that_does_not_fit_is_refused_in_one_line(digits, body, status, words):
    with pytest.raises(BadRequest) as refused:
        build_served(digits).read(body)
    assert refused.value.status == status and words in str(refused.value), str(refused.value)
    assert "\n" not in str(refused.value)


def test_token_inputs_are_integers_below_the_vocabulary(text):
    served = build_served(text)
    assert served.schema()["vocab"] == text.vocab
    ids = text.example(1)[0].tolist()
    assert served.forward(served.read({"inputs": ids})[0]).shape[-1] == text.vocab
    for bad, words in (([0.5] * len(ids), "must be integers"), ([text.vocab] * len(ids), "outside [0,")):
        with pytest.raises(BadRequest, match=words.replace("[", r"\[")):
            served.read({"inputs": bad})


@pytest.mark.parametrize("variant", ["bf16", "int8", "onnx"])
def test_a_variant_answers_close_to_the_model(digits, text, variant):
    x = digits.example(4)
    eager = build_served(digits).forward(x)
    served = build_served(digits, variant)
    out = served.forward(x)
    assert out.dtype == torch.float32 and out.shape == eager.shape
    assert (out - eager).abs().max() < 0.1 * eager.abs().max() + 0.05
    if variant == "int8":
        assert "int8 (dynamic) converted 3 layers" in served.note
    if variant == "onnx":
        assert served.note.startswith("ONNX Runtime") and "batches of 1-256" in served.note
        assert served.forward(digits.example(256)).shape[0] == 256  # the batch dimension is free
        tokens = build_served(text, "onnx")  # integer inputs, attention
        torch.testing.assert_close(
            tokens.forward(text.example(3)), text.model(text.example(3)), atol=1e-4, rtol=1e-4
        )


def test_the_pruned_variant_serves_a_smaller_model_and_says_what_it_left(digits, text):
    served = build_served(digits, "pruned", 0.25)
    dense = sum(p.numel() for p in digits.model.parameters())
    assert sum(p.numel() for p in served.model.parameters()) < dense
    x = digits.example(3)
    assert served.forward(x).shape == digits.model(x).shape
    assert "(25% of each hidden layer's units removed) shrank 3 layers" in served.note
    assert "not fine-tuned" in served.note
    # a transformer goes through the dependency graph, and its tokens still fit
    tokens = build_served(text, "pruned")
    assert tokens.forward(text.example(2)).shape[0] == 2 and "(50% of each hidden" in tokens.note


def test_an_unknown_variant_is_refused(digits):
    with pytest.raises(
        ConfigError, match="--variant must be one of eager, compiled, bf16, int8, pruned, onnx"
    ):
        build_served(digits, "fastest")
