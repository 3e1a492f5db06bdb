"""The exported serve.py: run from another folder beside the train.py that trained the model, it
answers as the model does in process, with the workbench server's checks and batching, imports no
workbench code, and refuses what it cannot serve in one line."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest
import torch

from workbench.config import RunConfig
from workbench.export import export
from workbench.serving.process import ServerProcess
from workbench.train.data import build_data
from workbench.train.models import build_model

pytestmark = pytest.mark.slow


def test_the_exported_server_answers_as_the_trained_model(tmp_path):
    cfg = RunConfig.smoke()
    bundle = tmp_path / "bundle"
    export(cfg, bundle)
    text = (bundle / "serve.py").read_text()
    assert "import workbench" not in text and "from workbench" not in text
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    trained = subprocess.run(
        [sys.executable, str(bundle / "train.py"), "--steps", "3"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
    )
    assert trained.returncode == 0, trained.stderr
    model = build_model(cfg, build_data(cfg))
    model.load_state_dict(torch.load(bundle / "out" / "model.pt", weights_only=True))
    x = torch.rand(3, 1, 8, 8)
    with ServerProcess(
        ["--max-batch", "4", "--max-wait-ms", "2"], command=(str(bundle / "serve.py"),)
    ) as server:
        request = urllib.request.Request(
            f"{server.url}/predict", data=json.dumps({"inputs": x.tolist()}).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as r:
            outputs = torch.tensor(json.loads(r.read())["outputs"])
        torch.testing.assert_close(outputs, model.eval()(x), atol=1e-5, rtol=1e-4)
        with urllib.request.urlopen(f"{server.url}/health", timeout=30) as r:
            assert "up to 4 samples" in json.loads(r.read())["batching"]
    refused = subprocess.run(
        [sys.executable, str(bundle / "serve.py"), "--variant", "int8"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
    )
    assert refused.returncode == 2 and refused.stderr.strip() == (
        "serve.py: --variant must be one of eager, compiled, bf16, got 'int8'"
    )
