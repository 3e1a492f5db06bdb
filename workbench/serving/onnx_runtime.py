"""The `onnx` serving variant: the model exported by torch.onnx (its dynamo exporter, the batch
dimension left free) and run by ONNX Runtime, which many people serve with. An optional extra:
`pip install 'workbench[onnx]'` (onnxruntime, onnx, onnxscript).

    model, note = onnx_model(subject.model, subject.example(2), max_batch=256)
    outputs = model(x)          # a tensor in, a tensor out, as the eager model's call

ONNX Runtime runs with the server's thread choice: as many intra-op threads as torch was given,
one inter-op thread, and no spinning where the server's threads wait passively.
"""

from __future__ import annotations

import logging
import os
import warnings

import torch
from torch import nn

from ..config import ConfigError
from ..machine.threads import WAIT_ENV

EXTRA = "pip install 'workbench[onnx]' (onnxruntime, onnx and onnxscript)"


class OnnxModel:
    """A session of ONNX Runtime called like the model it was exported from."""

    def __init__(self, session, dtype: torch.dtype):
        self.session, self.dtype = session, dtype
        self.input = session.get_inputs()[0].name

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = self.session.run(None, {self.input: x.to(self.dtype).numpy()})[0]
        return torch.from_numpy(out)

    def eval(self) -> "OnnxModel":
        return self


def onnx_model(model: nn.Module, example: torch.Tensor, max_batch: int) -> tuple[OnnxModel, str]:
    """`model` exported to ONNX with a batch of 1 to `max_batch`, in an ONNX Runtime session; and
    a line saying what runs it and how far its outputs are from the model's on `example`."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise ConfigError(f"--variant onnx needs ONNX Runtime: {EXTRA}") from None
    batch = torch.export.Dim("batch", min=1, max=max(2, max_batch))
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # it names every torchvision operator it skips
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                model, (example,), dynamo=True, dynamic_shapes=({0: batch},), verbose=False
            )
    except ImportError as e:
        raise ConfigError(f"--variant onnx needs {e.name or 'onnx'}: {EXTRA}") from None
    except Exception as e:  # noqa: BLE001 - any exporter failure is the model's, said in one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"--variant onnx: torch.onnx could not export this model: {first[:200]}") from None
    finally:
        quiet.setLevel(level)
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    if os.environ.get(WAIT_ENV, "").upper() == "PASSIVE":
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(
        program.model_proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    served = OnnxModel(session, example.dtype)
    with torch.inference_mode():
        gap = (served(example).float() - model(example).float()).abs().max().item()
    note = (
        f"ONNX Runtime {ort.__version__} ({options.intra_op_num_threads} intra-op thread(s)), the model "
        f"exported by torch.onnx with batches of 1-{max(2, max_batch)}; its outputs differ from the "
        f"eager model's by at most {gap:.2g} on an example"
    )
    return served, note
