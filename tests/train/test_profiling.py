"""The profiling pieces that run inside a rank, in this process: the config fields, activation
checkpointing, the exact memory counts, the optimizer implementations, and the GPU parts faked."""

from __future__ import annotations

import math
from contextlib import nullcontext

import pytest
import torch

from workbench.config import ConfigError, RunConfig
from workbench.machine import capability
from workbench.train import footprint
from workbench.train.activation_checkpointing import apply_checkpointing, resolve
from workbench.train.data import build_data, make_loader
from workbench.train.models import build_model, loss_fn
from workbench.train.precision import check_supported
from workbench.train.profiling import StepProfiler
from workbench.train.rank import RankEnv
from workbench.train.step import StepParts, cycle_batches, make_optimizer, train_step
from workbench.measure.steps import step_stats

CPU = torch.device("cpu")


def tiny(model: str) -> RunConfig:
    cfg = RunConfig.smoke().with_model(model)
    if model == "transformer":
        cfg = cfg.replace(**{"model.width": 32, "model.depth": 2, "data.num_samples": 64, "data.seq_len": 16})
    if model == "cnn":
        cfg = cfg.replace(
            **{
                "model.width": 8,
                "data.name": "synthetic_images",
                "data.image_size": 8,
                "data.num_samples": 64,
            }
        )
    return cfg.replace(**{"loader.batch_size": 8})


@pytest.mark.parametrize(
    "sections, message",
    [
        ({"train": {"checkpoint": "blocks"}}, r"train\.checkpoint must be a list of str, got 'blocks'"),
        ({"train": {"checkpoint": ["blocks", 3]}}, r"train\.checkpoint\[1\] must be a string, got 3"),
        ({"train": {"checkpoint": ["a b"]}}, r"train\.checkpoint\[0\] must be a module name"),
        (
            {"optim": {"impl": "vectorized"}},
            r"optim\.impl must be one of 'auto', 'for-loop', 'foreach', "
            r"'fused', got 'vectorized'",
        ),
        ({"run": {"profile_steps": -1}}, r"run\.profile_steps must be >= 0, got -1"),
        ({"run": {"steps": 10, "profile_steps": 6}}, r"run\.profile_steps must be <= run\.steps // 2 \(5\)"),
    ],
)
def test_new_fields_are_checked_with_the_field_named(sections, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_dict(sections)


def test_new_fields_round_trip():
    cfg = RunConfig.smoke().replace(
        **{"train.checkpoint": ["net.*"], "optim.impl": "foreach", "run.profile_steps": 3}
    )
    assert RunConfig.from_json(cfg.to_json()) == cfg


def test_checkpoint_names_resolve_and_bad_names_list_the_modules():
    cfg = tiny("transformer")
    model = build_model(cfg, build_data(cfg))
    assert resolve(model, ["blocks.layers.*"]) == ["blocks.layers.0", "blocks.layers.1"]
    with pytest.raises(
        ConfigError,
        match=r"train\.checkpoint\[0\] 'blocks\.layer' names no module of "
        r"this model \(TinyTransformerLM\); its modules: embed, blocks,",
    ):
        resolve(model, ["blocks.layer"])
    with pytest.raises(ConfigError, match=r"selects 'blocks\.layers\.0' inside 'blocks'"):
        resolve(model, ["blocks", "blocks.layers.0"])


def test_checkpointing_keeps_gradients_and_saves_less():
    cfg = tiny("transformer")
    data = build_data(cfg)
    x, y = data.train[list(range(8))]
    lossf = loss_fn(data.task)
    results = []
    for patterns in ([], ["blocks.layers.*"]):
        torch.manual_seed(0)
        model = build_model(cfg, data)
        names = apply_checkpointing(model, patterns)
        acts = footprint.saved_activations(model, x, y, lossf, checkpointed=names)
        lossf(model(x), y).backward()
        results.append((acts, [p.grad.clone() for p in model.parameters()]))
    (plain, g0), (ckpt, g1) = results
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(g0, g1))
    assert ckpt["total"] < plain["total"] and ckpt["kept_for_recompute"] > 0
    assert set(ckpt["per_module"]) >= {"blocks.layers.0", "blocks.layers.1"}
    assert not any(k.startswith("blocks.layers.0.") for k in ckpt["per_module"])  # nothing inside


@pytest.mark.parametrize("model", ["mlp", "cnn", "transformer"])
def test_parameter_gradient_and_adamw_state_bytes_are_exact(model):
    cfg = tiny(model)
    data = build_data(cfg)
    torch.manual_seed(0)
    net = build_model(cfg, data)
    opt = make_optimizer(cfg, net)
    params = list(net.parameters())  # tied weights once (the transformer's head is its embedding)
    if model == "mlp":  # 64 inputs, two hidden layers of 64, 10 classes
        count = (64 * 64 + 64) + (64 * 64 + 64) + (64 * 10 + 10)
        assert sum(p.numel() for p in params) == count
    else:
        count = sum(p.numel() for p in params)
    exact = 4 * count  # fp32
    assert footprint.parameter_bytes(net) == exact
    x, y = data.train[list(range(8))]
    loss_fn(data.task)(net(x), y).backward()
    assert footprint.gradient_bytes(net) == exact
    opt.step()
    # AdamW: exp_avg and exp_avg_sq like each parameter, and a 4-byte fp32 step count per tensor
    assert footprint.optimizer_state_bytes(opt) == 2 * exact + 4 * len(params)


@pytest.mark.parametrize(
    "impl, flags",
    [
        ("for-loop", {"foreach": False}),
        ("foreach", {"foreach": True}),
        ("fused", {"fused": True}),
        ("auto", {"foreach": None}),
    ],
)
def test_optimizer_impl_reaches_torch(impl, flags):
    cfg = RunConfig.smoke().replace(**{"optim.impl": impl})
    opt = make_optimizer(cfg, torch.nn.Linear(3, 2))
    assert {k: opt.defaults[k] for k in flags} == flags


def test_fused_is_refused_where_torch_has_no_kernel(monkeypatch):
    cfg = RunConfig.smoke().replace(**{"optim.impl": "fused"})
    check_supported(cfg, CPU)  # this torch has fused CPU kernels
    import torch.optim.optimizer as topt

    monkeypatch.setattr(topt, "_get_fused_kernels_supported_devices", lambda: ["cuda"])
    with pytest.raises(
        ConfigError,
        match=r"optim\.impl cannot be 'fused' on cpu: torch .* has fused "
        r"adamw kernels only on cuda, not on cpu; use optim\.impl",
    ):
        check_supported(cfg, CPU)
    assert capability.unsupported_reason(cfg.replace(**{"optim.impl": "auto"}), CPU, "fused_optimizer")


def test_profiled_steps_stay_out_of_the_figures():
    times = [1.0] * 4 + [9.0, 9.0] + [2.0] * 14  # steps 5 and 6 profiled (slow)
    stats = step_stats(times, [0.0] * 20, batch=10, world_size=1, profiled={5, 6})
    assert stats["step_time_ms_median"] == 2000.0 and stats["samples_per_s"] == 5.0
    assert step_stats(times, [0.0] * 20, 10, 1)["step_time_ms_p90"] > 2000.0


def test_the_phase_hook_does_not_change_the_step():
    cfg = tiny("mlp")
    data = build_data(cfg)
    seen = []

    def phase(name):
        seen.append(name)
        return nullcontext()

    losses = []
    for hook in (None, phase):
        torch.manual_seed(0)
        model = build_model(cfg, data)
        parts = StepParts(
            model,
            model,
            make_optimizer(cfg, model),
            torch.amp.GradScaler("cpu", enabled=False),
            nullcontext(),
            loss_fn(data.task),
            CPU,
            accum=2,
        )
        batches = cycle_batches(make_loader(data.train, cfg, train=True))
        kw = {"phase": hook} if hook else {}
        losses.append([train_step(parts, batches, **kw)[0] for _ in range(3)])
    assert losses[0] == losses[1]
    assert seen[:5] == ["data", "copy", "forward", "backward", "data"] and seen[8] == "optimizer"


def test_on_a_gpu_each_phase_waits_for_its_kernels(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    gpu = torch.device("cuda", 0)
    prof = StepProfiler(RunConfig.smoke(), RankEnv(), gpu, first=3, count=2)
    assert [s for s in range(1, 8) if prof.profiled(s)] == [3, 4]
    with prof._phase("forward"):
        assert calls == []
    assert calls == [gpu]


class FakeNvml:
    note = ""

    def sample(self):
        return [{"index": 0, "mem_used_gib": 3.0, "mem_total_gib": 80.0, "util_pct": 50.0, "processes": 1}]


def test_gpu_memory_figures_come_from_the_allocator_and_nvml(monkeypatch):
    fake = {
        "memory_allocated": 1 << 30,
        "memory_reserved": 2 << 30,
        "max_memory_allocated": 3 << 29,
        "max_memory_reserved": 5 << 29,
    }
    for name, value in fake.items():
        monkeypatch.setattr(torch.cuda, name, lambda device=None, v=value: v)
    out = footprint.device_memory(torch.device("cuda", 0), reader=FakeNvml())
    assert out["allocated_bytes"] == 1 << 30 and out["reserved_bytes"] == 2 << 30
    assert out["peak_allocated_bytes"] == 3 << 29 and out["peak_reserved_bytes"] == 5 << 29
    assert out["nvml_used_bytes"] == 3 << 30 and out["nvml_total_bytes"] == 80 << 30
    assert out["rss_bytes"] > 0
    missing = footprint.device_memory(torch.device("cuda", 1), reader=FakeNvml())
    assert "nvml_used_bytes" not in missing and "no device 1" in missing["nvml_note"]
    cpu = footprint.device_memory(CPU)
    assert set(cpu) == {"rss_bytes", "peak_rss_bytes"} and not math.isnan(cpu["rss_bytes"])


def test_an_export_checkpoints_the_same_modules_and_keeps_the_impl(tmp_path):
    import importlib.util
    import sys

    from workbench.export import export

    cfg = tiny("transformer").replace(**{"train.checkpoint": ["blocks.layers.*"], "optim.impl": "foreach"})
    export(cfg, tmp_path)
    spec = importlib.util.spec_from_file_location("exported_ckpt", tmp_path / "train.py")
    script = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = script
    spec.loader.exec_module(script)
    s = script.settings(script.CONFIG)
    model = script.build_model(s, script.build_data(s))
    assert script.apply_checkpointing(model, s.train.checkpoint) == ["blocks.layers.0", "blocks.layers.1"]
    assert model.blocks.layers[0].forward.checkpointed
    with pytest.raises(script.ConfigError, match="names no module of this model"):
        script.apply_checkpointing(model, ["nope"])
    assert script.make_optimizer(s, model).defaults["foreach"] is True
    assert "apply_checkpointing(model, cfg.train.checkpoint)" in (tmp_path / "train.py").read_text()
