"""Each filter of workbench.compress.quiet drops its one library message, triggered for real, and
lets an unrelated message of the same kind through; the torch.ao deprecation stays in the notes."""

from __future__ import annotations

import enum
import importlib.util
import json
import logging
import subprocess
import sys
import warnings

import pytest
import torch
from torch import nn

from workbench.compress import quiet
from workbench.compress.unstructured import SparseLinear
from workbench.compress.quantize import DEPRECATION_NOTE, quantize


@pytest.fixture
def warn_always():
    """torch says its C++ warnings once per process; say them every time, and record them all."""
    before = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yield seen
    torch.set_warn_always(before)


def texts(seen, category):
    return [str(w.message) for w in seen if issubclass(w.category, category)]


def tiny():
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).eval()


def test_sparse_csr_beta_notice_is_dropped_other_user_warnings_pass(warn_always):
    torch.randn(4, 4).to_sparse_csr()
    assert any(
        t.startswith("Sparse CSR tensor support is in beta state") for t in texts(warn_always, UserWarning)
    )  # the real message, unfiltered
    warn_always.clear()
    with quiet.sparse_csr():
        torch.randn(4, 4).to_sparse_csr()
        warnings.warn("Sparse tensors elsewhere: keep me", UserWarning)
    assert texts(warn_always, UserWarning) == ["Sparse tensors elsewhere: keep me"]
    warn_always.clear()
    SparseLinear(nn.Linear(4, 4))
    assert warn_always == []


def test_torch_ao_deprecations_are_dropped_other_warnings_pass(warn_always):
    torch.ao.quantization.quantize_dynamic(tiny(), {nn.Linear}, dtype=torch.qint8)
    assert any("torch.ao.quantization is deprecated" in t for t in texts(warn_always, DeprecationWarning))
    assert any(
        t.startswith("torch.quantize_per_tensor, torch.quantize_per_channel")
        for t in texts(warn_always, UserWarning)
    )  # the real messages, unfiltered
    warn_always.clear()
    with quiet.torch_ao_quantization():
        torch.ao.quantization.quantize_dynamic(tiny(), {nn.Linear}, dtype=torch.qint8)
        warnings.warn("torch.ao.something_else is deprecated", DeprecationWarning)
        warnings.warn("quantized tensors: keep me", UserWarning)
    assert [str(w.message) for w in warn_always] == [
        "torch.ao.something_else is deprecated",
        "quantized tensors: keep me",
    ]


def test_quantize_is_silent_and_says_the_deprecation_in_its_notes(warn_always):
    _, info = quantize(tiny(), "dynamic_int8", backend="torch.ao")
    assert warn_always == []
    assert DEPRECATION_NOTE in info["notes"] and "deprecated" in DEPRECATION_NOTE


class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def pytree_log():
    logger, handler = logging.getLogger("torch.utils._pytree"), Records()
    logger.addHandler(handler)
    yield handler.messages
    logger.removeHandler(handler)


def test_pytree_enum_note_is_dropped_during_the_torchao_import_only(pytree_log):
    class Shade(str, enum.Enum):  # what torchao's KernelPreference is
        DARK = "dark"

    with quiet.torchao_import():
        torch.utils._pytree.register_constant(Shade)
        logging.getLogger("torch.utils._pytree").warning("another pytree note: keep me")
    assert pytree_log == ["another pytree note: keep me"]

    class Light(str, enum.Enum):
        BRIGHT = "bright"

    torch.utils._pytree.register_constant(Light)  # outside the import: said as torch says it
    assert len(pytree_log) == 2 and pytree_log[1].startswith("<enum 'Light'> is an Enum subclass")


def test_torchao_cuda_library_failures_are_dropped_on_a_torch_without_cuda():
    cuda_lib = (
        "Failed to load /v/site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so: "
        "Could not load this library: /v/site-packages/torchao/_C_mxfp8.so"
    )
    others = [
        "Failed to load /v/site-packages/torchao/_C.abi3.so: keep me",
        "Skipping import of cpp extensions: keep me",
    ]
    logger, handler = logging.getLogger("torchao"), Records()
    logger.addHandler(handler)
    try:
        with quiet.torchao_import():
            for message in [cuda_lib, *others]:
                logger.warning(message)
        logger.warning(cuda_lib)  # after the import: said as torchao says it
    finally:
        logger.removeHandler(handler)
    news = [cuda_lib] if torch.version.cuda is not None else []  # a CUDA torch loads it
    assert handler.messages == [*news, *others, cuda_lib]


SPY = """
import json, logging
seen, kept = [], []
class Spy(logging.Filter):
    def filter(self, record):
        seen.append(record.getMessage()); return True
class Keep(logging.Handler):
    def emit(self, record):
        if record.name in NAMES:  # not its child loggers', which the spy does not see
            kept.append(record.getMessage())
NAMES = ("torchao", "torch.utils._pytree")
for name in NAMES:
    logging.getLogger(name).addFilter(Spy()); logging.getLogger(name).addHandler(Keep())
from workbench.compress.quantize import torchao_available
print(json.dumps({"available": torchao_available(), "seen": seen, "kept": kept}))
"""


def test_the_real_torchao_import_says_nothing_it_was_not_meant_to():
    if importlib.util.find_spec("torchao") is None:  # importorskip would import it here
        pytest.skip("torchao is not installed")
    out = subprocess.run([sys.executable, "-c", SPY], capture_output=True, text=True, timeout=120)
    got = json.loads(out.stdout)
    assert got["available"]
    assert "Failed to load" not in out.stderr and "is an Enum subclass" not in out.stderr
    cpu_only = torch.version.cuda is None
    assert got["kept"] == [
        m
        for m in got["seen"]
        if not (quiet.PYTREE_ENUM.match(m) or (cpu_only and quiet.TORCHAO_CUDA_LIBS.match(m)))
    ]
