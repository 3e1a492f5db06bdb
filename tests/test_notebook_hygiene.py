"""Every notebook is committed stripped: no outputs, no execution counts, no widget state."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.ui.nbstrip import main, problems, strip_file

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_stripped(path):
    found = problems(json.loads(path.read_text(encoding="utf-8")))
    assert not found, f"{path.name}: {found}; run python -m workbench.ui.nbstrip {path}"


def test_strip_clears_outputs_and_widget_state(tmp_path):
    nb = {"cells": [{"cell_type": "code", "execution_count": 3, "metadata": {}, "source": "1",
                     "outputs": [{"output_type": "execute_result", "data": {}, "metadata": {},
                                  "execution_count": 3}]},
                    {"cell_type": "markdown", "metadata": {}, "source": "# hi"}],
          "metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {}}},
          "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "x.ipynb"
    path.write_text(json.dumps(nb))
    assert main(["--check", str(path)]) == 1
    assert strip_file(path)
    clean = json.loads(path.read_text())
    assert problems(clean) == [] and "widgets" not in clean["metadata"]
    assert clean["cells"][0]["outputs"] == [] and clean["cells"][1]["source"] == "# hi"
    assert main(["--check", str(path)]) == 0
    assert not strip_file(path)
