"""FSDP2 beside DDP: the strategy setting and its refusals, the block rule, and real runs (2 DDP
ranks, 2 FSDP ranks, 1 process) whose per-rank parameter, gradient, optimizer and saved-activation
bytes are measured as predicted, whose FSDP losses are DDP's, and whose saved weights are whole."""

from __future__ import annotations

import pytest
import torch

from workbench.config import ConfigError, RunConfig
from workbench.distributed.launch import run
from workbench.events import read_events
from workbench.train.models import MLP, TinyTransformerLM
from workbench.train.restore import load_model
from workbench.train.footprint import saved_activations
from workbench.disk import mib
from workbench.train.sharding import (
    ACTIVATIONS,
    HELD,
    MEMORY_PARTS,
    PEAK,
    block_names,
    comm_bytes,
    per_rank_bytes,
    policy_compute,
)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"distributed.cpu_offload": True},
            "distributed.cpu_offload must be false unless distributed.strategy is 'fsdp', got True",
        ),
        (
            {"distributed.strategy": "fsdp", "precision.dtype": "fp16"},
            "precision.dtype must be 'fp32' or 'bf16'",
        ),
        ({"distributed.strategy": "fsdp", "optim.grad_accum_steps": 2}, "optim.grad_accum_steps must be 1"),
        ({"distributed.strategy": "zero"}, "distributed.strategy must be one of 'ddp', 'fsdp'"),
        (
            {"distributed.strategy": "fsdp", "run.profile_steps": 2, "run.steps": 20},
            "run.profile_steps must be 0",
        ),
    ],
)
def test_settings_fsdp_cannot_take_are_refused_in_one_line(change, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        RunConfig.smoke().replace(**change)
    assert "\n" not in str(e.value)


def test_the_block_rule_takes_a_transformers_layers_and_an_mlps_own_layers():
    lm = TinyTransformerLM(vocab_size=30, seq_len=8, width=16, depth=2, heads=2)
    assert block_names(lm, []) == ["blocks.layers.0", "blocks.layers.1"]
    assert block_names(MLP(64, 10, width=8, depth=2), []) == ["net.1", "net.3", "net.5"]
    assert block_names(MLP(64, 10, width=8, depth=2), ["net.1"]) == ["net.1"]
    with pytest.raises(ConfigError, match=r"distributed.fsdp_blocks\[0\] 'nope' names no module"):
        block_names(MLP(64, 10), ["nope"])


def test_the_prediction_splits_each_parameter_by_rows_as_fsdp2_does():
    cfg = RunConfig.smoke().replace(**{"distributed.strategy": "fsdp", "distributed.nproc": 3})
    model = torch.nn.Linear(4, 10)  # weight 10 x 4, bias 10: chunks of 4, 4 and 2 rows
    plan = per_rank_bytes(model, cfg, 3)
    assert [r["parameters"] for r in plan] == [(16 + 4) * 4, (16 + 4) * 4, (8 + 2) * 4]
    assert [r["optimizer"] for r in plan] == [2 * r["parameters"] + 2 * 4 for r in plan]


def test_the_peak_counts_ddp_s_buckets_or_fsdp_s_largest_block_gathered_with_its_gradients():
    model = MLP(64, 10, width=8, depth=2)  # net.1: 64 x 8 + 8 parameters, net.3: 72, net.5: 90
    ddp = RunConfig.smoke().replace(**{"distributed.nproc": 2})
    fsdp = ddp.replace(**{"distributed.strategy": "fsdp"})
    assert comm_bytes(model, ddp, 2) == (520 + 72 + 90) * 4  # a copy of every gradient
    # net.1 whole with its whole gradients, and the reduce-scatter input FSDP keeps of another
    # block (the largest other: net.5's gradients, fp32)
    assert comm_bytes(model, fsdp, 2) == 520 * (4 + 4) + 90 * 4
    mixed = fsdp.replace(**{"distributed.fsdp_mixed_precision": True})
    assert comm_bytes(model, mixed, 2) == 520 * (2 + 4) + 90 * 4  # gathered in bf16, reduced in fp32
    assert comm_bytes(model, ddp, 1) == 0


def saved_bytes(batch: int, width: int, depth: int, itemsize: int) -> int:
    """What autograd saves for backward in the smoke MLP (8 x 8 digits, 10 classes), from the
    shapes: the first Linear's input, each hidden layer's ReLU output (the next Linear's input
    too), the 10 log-probabilities, the int64 targets and nll_loss's scalar total weight, all but
    the targets in the dtype the layers compute in. The weights the Linears save are parameters
    (under FSDP the gathered ones): not counted."""
    return batch * ((64 + depth * width + 10) * itemsize + 8) + itemsize


def test_the_policy_s_forward_computes_in_bf16_and_leaves_the_model_as_it_was():
    """Under FSDP's mixed-precision policy the ranks' layers compute in bf16 (parameters gathered
    in bf16, each unit's floating inputs cast on entry; the int64 targets stay), so the activations
    predicted before launch are counted in bf16: half of fp32's, but for the targets."""
    fsdp = RunConfig.smoke().replace(**{"distributed.strategy": "fsdp", "distributed.nproc": 2})
    mixed = fsdp.replace(**{"distributed.fsdp_mixed_precision": True})
    model = MLP(64, 10, width=51, depth=2)
    before = {n: (p, p.detach().clone()) for n, p in model.named_parameters()}
    x, y = torch.randn(32, 8, 8), torch.randint(0, 10, (32,))
    lossf = torch.nn.functional.cross_entropy
    with policy_compute(model, mixed, 2):
        assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
        assert saved_activations(model, x, y, lossf)["total"] == saved_bytes(32, 51, 2, 2)
    for name, p in model.named_parameters():  # the same parameters, their fp32 values unrounded
        assert p is before[name][0] and torch.equal(p, before[name][1]) and p.dtype == torch.float32
    assert not model.net[1]._forward_pre_hooks and not model._forward_pre_hooks
    for cfg, ranks in ((mixed, 1), (fsdp, 2)):  # one rank shards nothing; no policy casts nothing
        with policy_compute(model, cfg, ranks):
            assert saved_activations(model, x, y, lossf)["total"] == saved_bytes(32, 51, 2, 4)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_with_the_bf16_policy_each_fsdp_rank_holds_what_was_predicted(precision):
    """2 FSDP ranks under the mixed-precision policy: every part predicted equals the measured byte
    for byte, the activations bf16's (what the ranks compute in), the rest fp32 shards; under bf16
    autocast too, which runs the loss's log_softmax in fp32 (10 log-probabilities a sample, and
    nll_loss's total weight, 2 bytes more each than bf16's)."""
    cfg = RunConfig.smoke().replace(
        **{
            "distributed.nproc": 2,
            "run.threads": 1,
            "run.steps": 6,
            "run.eval_batches": 0,
            "model.width": 51,
            "distributed.strategy": "fsdp",
            "precision.dtype": precision,
            "distributed.fsdp_mixed_precision": True,
        }
    )
    summary = run(cfg, timeout_s=300)
    assert summary["status"] == "completed", summary
    memory = summary["memory_per_rank"]
    assert memory["not_measured"] == [] and len(memory["measured"]) == 2
    batch = cfg.loader.batch_size
    activations = saved_bytes(batch, 51, cfg.model.depth, 2) + (
        batch * 10 * 2 + 2 if precision == "bf16" else 0
    )
    for predicted, measured in zip(memory["predicted"], memory["measured"]):
        for part in MEMORY_PARTS:
            assert predicted[part] == measured[part], (measured["rank"], part)
        assert measured["activations"] == activations, measured["rank"]
    assert (
        sum(m["parameters"] for m in memory["measured"]) == (64 * 51 + 51 + 51 * 51 + 51 + 51 * 10 + 10) * 4
    )  # fp32 shards


@pytest.mark.slow
def test_each_rank_holds_what_was_predicted_and_fsdp_trains_as_ddp(tmp_path):
    """Parameters, gradients and saved activations (read mid-step: the optimizer zeroes the one,
    backward frees the other) and optimizer state, measured on each rank, equal the prediction byte
    for byte, and the activations what the MLP's shapes say: 2 DDP ranks, 2 FSDP ranks, 1 process."""
    base = RunConfig.smoke().replace(
        **{"distributed.nproc": 2, "run.threads": 1, "run.steps": 6, "run.eval_batches": 0, "model.width": 51}
    )  # 51 rows: 26 + 25
    shapes = {
        "ddp": base,
        "fsdp": base.replace(**{"distributed.strategy": "fsdp"}),
        "one process": base.replace(**{"distributed.nproc": 1, "distributed.strategy": "fsdp"}),
    }
    runs = {name: run(cfg, timeout_s=300) for name, cfg in shapes.items()}
    activations = saved_bytes(base.loader.batch_size, 51, base.model.depth, 4)
    for strategy, summary in runs.items():
        assert summary["status"] == "completed", summary
        memory = summary["memory_per_rank"]
        assert memory["strategy"] == strategy
        assert len(memory["measured"]) == summary["world_size"]
        assert memory["not_measured"] == []
        predicts_peak = summary["allocator"] == "tcmalloc"  # glibc's retained memory is not predicted
        assert [n.split(" (")[0] for n in memory["not_predicted"]] == ([] if predicts_peak else ["peak"])
        for predicted, measured in zip(memory["predicted"], memory["measured"]):
            assert predicted["rank"] == measured["rank"]
            for part in MEMORY_PARTS:  # exactly, per rank
                assert predicted[part] == measured[part], (strategy, measured["rank"], part)
            assert measured["activations"] == activations, (strategy, measured["rank"])
            assert measured["peak"] > 0
            assert predicted["peak"] > 0 if predicts_peak else predicted["peak"] is None
    whole = runs["ddp"]["memory_per_rank"]["measured"][0]["parameters"]
    assert runs["one process"]["memory_per_rank"]["measured"][0]["gradients"] == whole
    shards = [m["parameters"] for m in runs["fsdp"]["memory_per_rank"]["measured"]]
    assert sum(shards) == whole and shards[0] > shards[1]  # each rank part (26 rows, 25), together all
    assert sum(m["gradients"] for m in runs["fsdp"]["memory_per_rank"]["measured"]) == whole
    losses = {
        s: [r["loss"] for r in read_events(summary["run_dir"]) if r["event"] == "step" and r["rank"] == 0]
        for s, summary in runs.items()
    }
    assert losses["fsdp"] == pytest.approx(losses["ddp"], abs=1e-5)  # the same training
    ready = next(r for r in read_events(runs["fsdp"]["run_dir"]) if r["event"] == "ready")
    assert ready["fsdp_blocks"] == ["net.1", "net.3", "net.5"]
    from workbench.profile.breakdown_text import per_rank_lines

    table = per_rank_lines(runs["fsdp"]["memory_per_rank"])  # what `workbench profile` prints
    assert table[0].startswith("  per rank (FSDP):") and [t.split()[:2] for t in table[2:4]] == [
        ["rank", "0"],
        ["rank", "1"],
    ]
    assert table[0].split()[-2:] == ["activations", "peak"]
    assert table[2].split()[-8:-6] == [f"{activations / 2**20:,.2f}", "MiB"]  # measured, rank 0
    model = load_model(runs["fsdp"]["run_dir"])  # the saved weights are whole, not a shard
    assert sum(p.numel() for p in model.parameters()) * 4 == whole


@pytest.mark.slow
def test_an_ab_of_ddp_against_fsdp_puts_throughput_and_memory_per_rank_side_by_side():
    from workbench.trials.config_ab import ab_test

    ddp = RunConfig.smoke().replace(
        **{
            "model.width": 256,
            "distributed.nproc": 2,
            "run.oversubscribe": True,
            "run.eval_batches": 0,
            "run.save_weights": False,
        }
    )
    result = ab_test(ddp, ddp.replace(**{"distributed.strategy": "fsdp"}), rounds=2, labels=("ddp", "fsdp"))
    # a pair whose two slices met different loads (the suite's other tests) is dropped, as always
    c = result.comparison  # a dropped pair is measured again, up to as many extra rounds
    assert c.pairs == 2 or c.pairs + c.dropped == 4
    assert len(result.samples_per_s["fsdp"]) == 2
    memory = result.memory_per_rank
    held = {label: [sum(r[k] for k in HELD) for r in sides["measured"]] for label, sides in memory.items()}
    assert len(held["ddp"]) == len(held["fsdp"]) == 2
    assert max(held["fsdp"]) < 0.6 * min(held["ddp"])  # each FSDP rank holds about half
    for sides in memory.values():  # the JSON too: every part predicted beside measured
        for want, got in zip(sides["predicted"], sides["measured"]):
            assert want[ACTIVATIONS] == got[ACTIVATIONS] > 0 and want[PEAK] > 0
    assert result.as_dict()["memory_per_rank"] == memory
    text = result.text()
    rank0 = memory["fsdp"]["measured"][0][ACTIVATIONS]
    assert (
        "ddp: per rank, measured (predicted): rank 0 parameters + gradients + optimizer "
        f"{mib(held['ddp'][0])} ({mib(held['ddp'][0])}), activations"
    ) in text
    assert f"activations {mib(rank0)} ({mib(rank0)}), peak" in text
    assert "fsdp: per rank, measured (predicted): rank 0" in text and "fsdp vs ddp:" in text


EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples"


LLAMA = """from transformers import LlamaConfig, LlamaForCausalLM


def build(vocab_size, seq_len):
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, max_position_embeddings=seq_len))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "model, data", [("gpt2.py:build", "text"), ("llama", "text"), ("resnet.py:build", "digits")]
)
def test_your_models_train_under_fsdp_with_their_blocks_said_before_launch(model, data, tmp_path):
    """Hugging Face's GPT-2 (a tied head, Conv1D layers), a Llama with grouped-query attention and
    the residual CNN: the blocks FSDP will shard are a note of the launch, before any rank starts,
    and the ranks shard those."""
    from workbench.distributed.launch import launcher, start_run

    if model == "llama":
        (tmp_path / "llama.py").write_text(LLAMA)
    name = f"{tmp_path / 'llama.py'}:build" if model == "llama" else f"{EXAMPLES / model}"
    cfg = RunConfig.smoke().replace(
        **{
            "model.name": name,
            "data.name": data,
            "distributed.nproc": 2,
            "distributed.strategy": "fsdp",
            "run.steps": 3,
            "run.eval_batches": 0,
            "run.oversubscribe": True,
            "run.save_weights": False,
        }
    )
    ddp = launcher().plan(cfg.replace(**{"distributed.strategy": "ddp"}))  # checked first: its
    assert not [n for n in ddp.notes if "FSDP" in n]  # answer is kept, and must not serve FSDP's
    handle = start_run(cfg, tmp_path / "run")
    said = [n for n in handle.notes if n.startswith("FSDP shards")]
    assert len(said) == 1, handle.notes
    assert handle.wait(240) == 0 and handle.summary()["status"] == "completed", handle.log_tail()
    ready = [r for r in read_events(handle.run_dir) if r["event"] == "ready"]
    blocks = ready[0]["fsdp_blocks"]
    assert len(ready) == 2 and all(r["fsdp_blocks"] == blocks for r in ready) and blocks
    assert said[0].startswith(f"FSDP shards {len(blocks)} block(s), then the root: {blocks[0]}")


SCALED = """
import torch
from torch import nn


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
        self.temperature = nn.Parameter(torch.tensor(1.0))  # a scalar: nothing to split

    def forward(self, x):
        return self.net(x) / self.temperature


def build():
    return Scaled()
"""


def test_a_parameter_fsdp_cannot_shard_is_refused_before_launch_by_name(tmp_path, capsys):
    from workbench.cli import main as cli

    (tmp_path / "scaled.py").write_text(SCALED)
    runs = tmp_path / "runs"
    assert (
        cli(
            [
                "run",
                "--preset",
                "smoke",
                "--model",
                f"{tmp_path / 'scaled.py'}:build",
                "--set",
                "distributed.nproc=2",
                "--set",
                "distributed.strategy=\"fsdp\"",
                "--set",
                "run.oversubscribe=true",
                "--set",
                f"run.runs_dir=\"{runs}\"",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "scalar parameter(s) temperature" in err, err
    assert not runs.exists() or not any(runs.iterdir())  # refused before any folder was made


def test_a_cpu_rank_peak_is_predicted_under_tcmalloc_or_on_a_gpu_and_under_glibc_says_why_not(monkeypatch):
    from workbench.train import trainer

    monkeypatch.setattr(trainer, "allocator_in_use", lambda: "system")
    why = trainer.peak_unpredictable(torch.device("cpu"))
    assert "malloc keeps freed buffers resident" in why and "libtcmalloc-minimal4" in why
    assert trainer.peak_unpredictable(torch.device("cuda")) == ""  # the caching allocator's peak
    monkeypatch.setattr(trainer, "allocator_in_use", lambda: "tcmalloc")
    assert trainer.peak_unpredictable(torch.device("cpu")) == ""
