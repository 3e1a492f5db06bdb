"""The model contract: data facts a factory asks for, output adapters, the one-batch check and its
messages; a diverged run's status and valid summary JSON."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from workbench.config import RunConfig
from workbench.runstore import read_summary, write_json_atomic
from workbench.train.contract import (
    ContractError,
    check_model,
    data_facts,
    factory_kwargs,
    fit_output,
    output_adapter,
)
from workbench.train.data import build_data
from workbench.train.models import build_model
from workbench.train.trainer import outcome
from workbench.ui.series import RunSeries

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TEXT = RunConfig.smoke().replace(
    **{"data.name": "text", "model.name": "transformer", "data.num_samples": 64, "data.seq_len": 16}
)


def test_each_data_set_states_its_facts():
    digits = data_facts(build_data(RunConfig.smoke()))
    assert digits == {"input_shape": (1, 8, 8), "num_classes": 10, "in_channels": 1}
    text = data_facts(build_data(TEXT))
    assert text["seq_len"] == 16 and text["vocab_size"] == text["num_classes"] > 10
    assert "in_channels" not in text


def test_a_factory_gets_the_facts_it_names_and_model_kwargs_win():
    def build(vocab_size, seq_len, width=8):
        pass

    def loose(**kwargs):
        pass

    facts = {"vocab_size": 30, "seq_len": 16, "num_classes": 30}
    assert factory_kwargs(build, {"width": 4}, facts) == {"vocab_size": 30, "seq_len": 16, "width": 4}
    assert factory_kwargs(build, {"seq_len": 8}, facts)["seq_len"] == 8
    assert factory_kwargs(loose, {"a": 1}, facts) == {"a": 1}  # **kwargs is not a request


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(64, 10)

    def forward(self, x):
        return self.l(x.flatten(1)), torch.tensor(0.0)


def test_adapters_are_chosen_on_one_batch_and_survive_a_copy():
    from transformers.modeling_outputs import CausalLMOutput

    t = torch.ones(2, 3)
    assert output_adapter(t) == "tensor"
    assert output_adapter((t, None)) == "first" and output_adapter([t]) == "first"
    assert output_adapter({"logits": t}) == "logits"
    assert output_adapter(CausalLMOutput(logits=t)) == "logits"
    assert output_adapter("nope") == "unknown"
    model = Pair()
    kind, logits = fit_output(model, torch.rand(2, 1, 8, 8))
    assert kind == "first" and logits.shape == (2, 10)
    twin = copy.deepcopy(model)
    assert twin(torch.rand(3, 1, 8, 8)).shape == (3, 10)  # the adapter travels with a copy
    assert list(twin.state_dict()) == ["l.weight", "l.bias"]  # and leaves the weights alone
    assert fit_output(twin, torch.rand(2, 1, 8, 8))[0] == "first"  # fitted once


@pytest.mark.parametrize(
    "body, match",
    [
        (
            "return self.l(x.flatten(1)[:, :2])",
            r"the model failed on one batch of digits data \(x is \(2, 1, 8, 8\) float32\): "
            r"RuntimeError: mat1 and mat2",
        ),
        (
            "return self.l(x.flatten(1))[:, :3]",
            r"digits data needs \(B, C\) logits, here \(2, 10\) .* the model returned \(B, C\) = \(2, 3\)",
        ),
        ("return 'logits'", "digits data needs logits from the model: .* it returned str"),
        ("return self.l(x.flatten(1)).long()", "needs float logits"),
    ],
)
def test_the_check_says_what_was_expected_and_what_came_back(body, match):
    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(64, 10)

    exec(f"def forward(self, x):\n    {body}", globals(), ns := {})
    Bad.forward = ns["forward"]
    with pytest.raises(ContractError, match=match):
        check_model(Bad(), build_data(RunConfig.smoke()))


def test_text_needs_a_logit_per_position():
    class LastOnly(nn.Module):
        def __init__(self, v):
            super().__init__()
            self.e = nn.Embedding(v, v)

        def forward(self, idx):
            return self.e(idx)[:, -1]

    data = build_data(TEXT)
    v = data.num_classes
    with pytest.raises(
        ContractError,
        match=rf"text data needs \(B, T, V\) logits, here \(2, 16, {v}\)"
        rf".*the model returned \(B, V\) = \(2, {v}\); .*FullLogits",
    ):
        check_model(LastOnly(v), data)


def test_the_examples_fit_with_the_documented_glue_only():
    gpt = RunConfig.smoke().replace(
        **{
            "model.name": f"{EXAMPLES}/gpt.py:build",
            "data.name": "text",
            "data.num_samples": 64,
            "data.seq_len": 16,
        }
    )
    assert build_model(gpt, build_data(gpt))(torch.zeros(2, 16, dtype=torch.long)).dim() == 3
    bare = gpt.replace(**{"model.name": f"{EXAMPLES}/gpt.py:build_bare"})
    with pytest.raises(ContractError, match=r"the model returned \(B, T, V\) = \(2, 1, .*FullLogits"):
        build_model(bare, build_data(bare))
    hf = gpt.replace(**{"model.name": f"{EXAMPLES}/gpt2.py:build"})
    model = build_model(hf, build_data(hf))
    assert model.workbench_output == "logits"


def test_a_user_dataset_of_token_windows_is_a_language_models_data(tmp_path):
    (tmp_path / "tok.py").write_text(
        "import torch\nclass W(torch.utils.data.Dataset):\n    vocab_size = 7\n"
        "    def __len__(self):\n        return 20\n"
        "    def __getitem__(self, i):\n        x = torch.arange(i, i + 9) % 7\n"
        "        return x[:-1], x[1:]\n"
        "def build():\n    return W()\n"
    )
    data = build_data(
        RunConfig.smoke().replace(**{"data.name": "dataset", "data.factory": f"{tmp_path}/tok.py:build"})
    )
    assert data.task == "lm" and data.num_classes == 7 and data.input_shape == (8,)
    assert data_facts(data)["vocab_size"] == 7


TOKENS_TO_CLASSIFY = """
import numpy as np
import torch
from torch import nn
class Reviews(torch.utils.data.Dataset):  # token ids (numpy), one label each
    classes = ["bad", "good"]
    def __len__(self):
        return 30
    def __getitem__(self, i):
        return np.array([i % 5, 3 * i % 41, 1]), i % 2
class Named(Reviews):
    vocab_size = 100
def build():
    return Reviews()
def build_named():
    return Named()
def model(vocab_size, seq_len, num_classes):
    net = nn.Sequential(nn.Embedding(vocab_size, 8), nn.Flatten(), nn.Linear(8 * seq_len, num_classes))
    net.vocab_size = vocab_size
    return net
"""


def test_a_dataset_of_token_ids_to_classify_gives_the_factory_its_vocab_size(tmp_path):
    (tmp_path / "reviews.py").write_text(TOKENS_TO_CLASSIFY)
    for factory, vocab in (("build", 41), ("build_named", 100)):  # the largest id + 1, or stated
        cfg = RunConfig.smoke().replace(
            **{
                "data.name": "dataset",
                "data.factory": f"{tmp_path}/reviews.py:{factory}",
                "model.name": f"{tmp_path}/reviews.py:model",
            }
        )
        data = build_data(cfg)
        assert data.task == "classify" and data.num_classes == 2
        assert data_facts(data)["seq_len"] == 3
        assert build_model(cfg, data).vocab_size == vocab


def test_a_diverged_run_says_so_and_its_summary_stays_json(tmp_path):
    summary = {
        "final_loss": float("nan"),
        "first_nonfinite_step": 3,
        "nonfinite_losses": 8,
        "steps": 10,
        "eval_loss": float("inf"),
    }
    ended = outcome(summary)
    assert ended["status"] == "diverged" and "at step 3" in ended["message"]
    assert outcome({"final_loss": 0.1})["status"] == "completed"
    write_json_atomic(tmp_path / "summary.json", {**summary, **ended})
    text = (tmp_path / "summary.json").read_text()
    back = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert back["final_loss"] is None and back["eval_loss"] is None and back["status"] == "diverged"


def test_the_dashboard_series_shows_divergence():
    s = RunSeries()
    s.feed(
        [
            {"event": "step", "rank": 0, "step": 1, "loss": 2.0},
            {"event": "step", "rank": 0, "step": 2, "loss": math.nan},
        ]
    )
    assert s.first_nonfinite == 2 and "non-finite" in s.message
    s.feed([{"event": "done", "rank": 0, "status": "diverged", "message": "the loss became nan"}])
    assert s.status == "diverged" and s.finished and s.message == "the loss became nan"


def test_a_run_read_back_from_its_events_keeps_the_diverged_status(tmp_path):
    (tmp_path / "rank0.jsonl").write_text(
        '{"event": "step", "rank": 0, "step": 1, "loss": NaN}\n'
        '{"event": "done", "rank": 0, "status": "diverged"}\n'
    )
    assert read_summary(tmp_path)["status"] == "diverged"


@pytest.mark.slow
def test_a_real_run_whose_loss_goes_nan_is_diverged_everywhere(one_thread, runs_root, capsys):
    from workbench.cli import main as cli_main
    from workbench.runstore import compare

    code = cli_main(["run", "--preset", "smoke", "--lr", "1e12", "--steps", "12", "--json"])
    assert code == 3  # diverged: every step ran, the loss did not survive
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "diverged" and out["final_loss"] is None
    assert "became nan" in out["message"]
    run_dir = Path(out["run_dir"])
    json.loads(
        (run_dir / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in summary.json")
    )
    assert compare([run_dir])["status"].tolist() == ["diverged"]
