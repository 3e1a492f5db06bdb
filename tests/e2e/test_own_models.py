"""Your own model through every strategy, with real outside model code: a GPT-style model with a
tied head whose forward returns (logits, loss), Hugging Face's GPT-2 from a small config, a
residual CNN, and a residual CNN on a Dataset of your own (examples/). Each trains on 1 and 2
torchrun ranks, is pruned (unstructured and structured) and quantized from its run folder with
the coverage checked and the result scored, and is exported with its code and reproduced."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.config import RunConfig
from workbench.compress.unstructured import copy_model, magnitude_prune, make_real, pruning_coverage
from workbench.compress.quantize import quantize
from workbench.compress.structured import structured_coverage, structured_prune
from workbench.compress.subject import Subject
from workbench.distributed.launch import run
from workbench.export import export
from workbench.export.verify import reproduce

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TEXT = {"data.name": "text", "data.num_samples": 128, "data.seq_len": 16}
CASES = {  # name -> config changes, and the coverage each strategy must reach
    "gpt": (
        {"model.name": f"{EXAMPLES}/gpt.py:build", "model.kwargs": {"n_embd": 32}, **TEXT},
        dict(prune=(0.9, 1.0), quant=(0.9, 1.0), structured=(0.5, 0.8)),
    ),
    "gpt2": (
        {"model.name": f"{EXAMPLES}/gpt2.py:build", "model.kwargs": {"width": 32}, **TEXT},
        dict(prune=(0.9, 1.0), quant=(0.9, 1.0), structured=(0.5, 0.8)),
    ),
    "resnet": (
        {
            "model.name": f"{EXAMPLES}/resnet.py:build",
            "model.kwargs": {"width": 8},
            "data.name": "synthetic_images",
            "data.num_samples": 256,
        },
        dict(prune=(0.95, 1.0), quant=(0.0, 0.05), structured=(1.0, 1.0)),
    ),
    "dataset": (
        {
            "model.name": f"{EXAMPLES}/resnet.py:build",
            "model.kwargs": {"width": 8},
            "data.name": "dataset",
            "data.factory": f"{EXAMPLES}/strokes.py:build",
            "data.kwargs": {"size": 400},
        },
        dict(prune=(0.95, 1.0), quant=(0.0, 0.05), structured=(1.0, 1.0)),
    ),
}


def config(name: str, **more) -> RunConfig:
    base = RunConfig.smoke().replace(
        **{"run.steps": 6, "run.eval_batches": 1, "loader.batch_size": 16, "run.threads": 1}
    )
    return base.replace(**CASES[name][0], **more)


def within(value: float, bounds: tuple) -> bool:
    return bounds[0] - 1e-9 <= value <= bounds[1] + 1e-9


@pytest.mark.parametrize("name", list(CASES))
def test_your_model_through_every_strategy(name, one_thread, tmp_path):
    want = CASES[name][1]
    one = run(config(name), timeout_s=300)
    assert one["status"] == "completed", one
    assert one["output_adapter"] in ("the tensor itself", "the .logits of the returned output")
    two = run(config(name, **{"distributed.nproc": 2}), timeout_s=300)
    assert two["status"] == "completed" and two["world_size"] == 2, two

    subject = Subject.from_run(one["run_dir"])  # the trained weights, through the factory again
    dense = subject.evaluate(subject.model)
    assert 0.0 <= dense <= 1.0

    cov = pruning_coverage(subject.model)
    assert within(cov["coverage"], want["prune"]), cov["coverage"]
    pruned = make_real(magnitude_prune(copy_model(subject.model), 0.5, scope="global"))
    assert 0.0 <= subject.evaluate(pruned) <= 1.0

    small = structured_prune(subject.model, 0.5, example=subject.example(2))
    scov = structured_coverage(subject.model, small)
    assert scov["tool"] == "torch-pruning" and within(scov["coverage"], want["structured"])
    assert sum(p.numel() for p in small.parameters()) < sum(p.numel() for p in subject.model.parameters())
    assert 0.0 <= subject.evaluate(small) <= 1.0

    q, info = quantize(subject.model, "dynamic_int8")
    assert within(info["coverage"]["coverage"], want["quant"]) and info["converted"] >= 1
    assert info["coverage"]["partial"] == (want["quant"][1] < 0.5)
    assert 0.0 <= subject.evaluate(q) <= 1.0

    bundle = export(one["run_dir"], tmp_path / "exported")
    carried = {p.name for p in bundle.files}
    assert Path(config(name).model.name.rpartition(":")[0]).name in carried
    if name in ("resnet", "dataset"):
        assert "blocks.py" in carried  # the local module resnet.py imports
    if name == "gpt2":
        assert "transformers" in bundle.needs
    df = reproduce(tmp_path / "exported", one["run_dir"])
    assert len(df) == 6 and df["abs_diff"].max() < 1e-5, df


def test_your_dataset_in_a_fine_tuned_sweep_the_stacking_study_and_a_two_rank_export(one_thread, tmp_path):
    from workbench.compress.prune_sweep import SweepConfig, run_sweep
    from workbench.stacking.inference import inference_study

    result = run(config("dataset", **{"distributed.nproc": 2}), timeout_s=300)
    assert result["status"] == "completed", result
    subject = Subject.from_run(result["run_dir"])
    df = run_sweep(
        subject,
        SweepConfig(amounts=[0.0, 0.5], method="structured", finetune_epochs=1, batch_sizes=(1, 8), rounds=6),
    )
    assert df["accuracy_finetuned"].notna().all() and df["coverage"].iloc[1] == 1.0
    study = inference_study(result["run_dir"], rounds=6, batch=8)
    assert list(study["status"][:1]) == ["baseline"] and study["samples_per_s"].notna().all()
    export(result["run_dir"], tmp_path / "exported")
    both = reproduce(tmp_path / "exported", result["run_dir"])  # torchrun, 2 ranks
    assert both["abs_diff"].max() < 1e-5, both
