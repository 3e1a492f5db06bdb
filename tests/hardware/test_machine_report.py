"""The hardware report and peak lookups, on this CPU and on faked GPUs (no GPU needed)."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from gpucheck_fakes import FakeNVML
from workbench.hardware import machine_report
from workbench.machine import cpu as cpu_mod
from workbench.machine import gpu
from workbench.machine import peaks as ceilings
from workbench.machine.gpus import GPUS, find_gpu, gpu_table

SPR_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
cpu MHz\t\t: 2000.000
flags\t\t: fpu sse avx2 fma avx512f avx512_bf16 avx512_vnni amx_tile amx_bf16 amx_int8
processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
"""


def test_parse_cpuinfo_finds_model_cores_clock_and_amx():
    info = cpu_mod.parse_cpuinfo(SPR_CPUINFO)
    assert info["model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert info["logical_cpus"] == 2 and info["mhz"] == 2000.0
    assert info["flags"]["amx_bf16"] and info["flags"]["amx_int8"] and info["flags"]["avx512f"]
    assert not info["flags"]["amx_fp16"] and not info["flags"]["avx_vnni"]


@pytest.mark.parametrize(
    "value, usable",
    [
        ("avx2", {"avx2", "fma"}),
        ("AVX512_CORE_BF16", {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"}),
        (
            "AVX10_1_512_AMX",
            {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"},
        ),
        ("", None),
        ("ALL", None),
        ("no-such-isa", None),
    ],
)  # what oneDNN ignores caps nothing
def test_onednn_s_isa_cap_turns_off_the_flags_it_forbids_and_says_so(value, usable):
    info = cpu_mod.cap_flags(cpu_mod.parse_cpuinfo(SPR_CPUINFO), {"ONEDNN_MAX_CPU_ISA": value})
    on = {f for f, has in info["flags"].items() if has}
    every = {f for f, has in cpu_mod.parse_cpuinfo(SPR_CPUINFO)["flags"].items() if has}
    assert on == (usable if usable is not None else every)
    assert set(info["capped"]) == every - on
    assert info["cap"] == (f"ONEDNN_MAX_CPU_ISA={value.upper()}" if every - on else "")
    text = cpu_mod.isa_text(info)
    assert ("not used: " in text) == bool(every - on)
    if value == "avx2":
        assert text == (
            "avx2, fma (not used: avx512f, avx512_bf16, avx512_vnni, amx_tile, amx_bf16, "
            "amx_int8, by ONEDNN_MAX_CPU_ISA=AVX2)"
        )


def test_a_lessons_reason_under_the_cap_says_whose_flags_it_read(monkeypatch):
    from workbench.hardware.lessons import units_text

    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx2")
    flags = {f for f, on in cpu_mod.cap_flags(cpu_mod.parse_cpuinfo(SPR_CPUINFO))["flags"].items() if on}
    why = units_text("bf16", sorted(flags))
    assert why == "this CPU under ONEDNN_MAX_CPU_ISA=AVX2 lists no bf16 instructions", why
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert units_text("bf16", sorted(flags)) == "this CPU lists no bf16 instructions"


def test_report_on_this_machine_works_without_a_gpu():
    rep = machine_report.hardware_report()
    assert rep["cpu"]["logical_cpus"] >= 1 and rep["cpu"]["torch_threads"] >= 1
    assert rep["memory"]["total_gib"] > 0
    assert rep["torch"]["torch"] == torch.__version__
    if not torch.cuda.is_available():
        assert rep["gpu"] == {"count": 0, "gpus": [], "links": []}
    text = machine_report.format_report(rep)
    assert "CPU" in text and "torch" in text and "GPU" in text


class TwoGpuNVML(FakeNVML):
    """Two GPUs joined by NVLink (or not), on an older driver that answers in bytes."""

    def __init__(self, nvlink=True):
        super().__init__()
        self.nvlink = nvlink

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlSystemGetDriverVersion(self):
        return b"550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        return 0 if self.nvlink else 4

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return 30


@pytest.fixture
def fake_gpus(monkeypatch):
    """torch.cuda answering as a machine with two H100 SXM GPUs."""
    props = types.SimpleNamespace(
        name="NVIDIA H100 80GB HBM3", multi_processor_count=132, total_memory=80 * 2**30
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: props.name)
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda a, b: True)
    monkeypatch.setitem(sys.modules, "pynvml", TwoGpuNVML())
    return props


def test_faked_gpus_report_capability_dtypes_driver_and_nvlink(fake_gpus):
    g = gpu.gpu_info()
    assert g["count"] == 2 and g["driver"] == "550.54.15" and g["driver_cuda"] == "12.4"
    d = g["gpus"][0]
    assert (d["name"], d["capability"], d["sms"], d["memory_gib"]) == (
        "NVIDIA H100 80GB HBM3",
        "9.0",
        132,
        80.0,
    )
    assert d["dtypes"] == {"fp16": True, "bf16": True, "tf32": True, "int8": True, "fp8": True}
    assert d["pcie_gen"] == 5 and d["power_limit_w"] == 700
    assert g["links"] == [{"a": 0, "b": 1, "peer_access": True, "kind": "NVLink"}]
    text = machine_report.format_report({**machine_report.hardware_report(), "gpu": g})
    assert "GPU0 <-> GPU1: NVLink, peer access yes" in text and "fp8" in text


def test_faked_gpus_without_nvlink_show_the_pcie_path(fake_gpus, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", TwoGpuNVML(nvlink=False))
    assert gpu.gpu_info()["links"][0]["kind"] == "PCIe via PCIe host bridge"


def test_faked_gpu_without_pynvml_still_reports(fake_gpus, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    g = gpu.gpu_info()
    assert g["driver"] is None and g["gpus"][0]["sms"] == 132
    assert g["links"][0]["kind"] == "unknown" and g["links"][0]["peer_access"] is True


def test_older_gpus_lack_bf16_tf32_and_fp8():
    assert gpu.gpu_dtypes(7, 0) == {"fp16": True, "bf16": False, "tf32": False, "int8": False, "fp8": False}
    assert gpu.gpu_dtypes(8, 0)["bf16"] and not gpu.gpu_dtypes(8, 0)["fp8"]
    assert gpu.gpu_dtypes(8, 9)["fp8"]


def test_gpu_table_covers_the_common_gpus_with_sources():
    names = {g.name for g in GPUS}
    for want in (
        "V100",
        "T4",
        "A10",
        "L4",
        "A100 40GB",
        "A100 80GB",
        "L40S",
        "H100 SXM",
        "H100 PCIe",
        "H200",
        "RTX 3090",
        "RTX 4090",
    ):
        assert any(n.startswith(want) for n in names), want
    for g in GPUS:
        assert g.source and g.memory_gib > 0 and g.bandwidth_gbs > 0 and g.interconnect
        assert g.peak("fp32") > 0 and g.peak("fp16") >= g.peak("fp32")
        if g.peak("bf16"):
            assert g.peak("bf16") >= g.peak("fp32")
    assert len(gpu_table()) == len(GPUS)


@pytest.mark.parametrize(
    "name, entry",
    [
        ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla T4", "T4"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2 32GB"),
    ],
)
def test_torch_device_names_find_their_table_entry(name, entry):
    assert find_gpu(name).name == entry


def test_unknown_gpu_has_no_spec_peak(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: "Some Future GPU")
    peak, basis, source = ceilings.spec_peak("cuda", "bf16")
    assert peak is None and "not in the GPU table" in source


def test_spec_peak_of_a_faked_h100_is_its_datasheet_figure(fake_gpus):
    peak, basis, _ = ceilings.spec_peak("cuda:0", "bf16")
    assert (peak, basis) == (990, "spec")


def test_cpu_peak_estimate_uses_amx_when_present():
    cpu = cpu_mod.parse_cpuinfo(SPR_CPUINFO)
    assert ceilings.cpu_peak_estimate("bf16", cpu, threads=2) == pytest.approx(1024 * 2e9 * 2 / 1e12)
    assert ceilings.cpu_peak_estimate("int8", cpu, threads=1) == pytest.approx(2048 * 2e9 / 1e12)
    assert ceilings.cpu_peak_estimate("fp32", cpu, threads=1) == pytest.approx(64 * 2e9 / 1e12)
    # no fp16 units on this CPU: the math runs at the fp32 rate
    assert ceilings.cpu_peak_estimate("fp16", cpu, threads=1) == pytest.approx(64 * 2e9 / 1e12)
    assert ceilings.cpu_peak_estimate("fp32", {**cpu, "mhz": None}, threads=1) is None
