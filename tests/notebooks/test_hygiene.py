"""Every notebook is committed stripped by nbstripout: no outputs, no execution counts, no widget
state (cell ids are kept: nbformat 4.5 needs them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
NBSTRIPOUT = [sys.executable, "-m", "nbstripout", "--keep-id"]


def test_every_notebook_is_stripped():
    """One check of them all: a process each would cost more than the checks. nbstripout names
    each notebook it would strip."""
    check = subprocess.run([*NBSTRIPOUT, "--verify", *map(str, NOTEBOOKS)], capture_output=True, text=True)
    assert check.returncode == 0, f"run `make strip`: {check.stdout}"
    assert len(NOTEBOOKS) >= 9


def test_nbstripout_clears_outputs_and_widget_state(tmp_path):
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": 3,
                "id": "a1",
                "metadata": {},
                "source": "1",
                "outputs": [
                    {"output_type": "execute_result", "data": {}, "metadata": {}, "execution_count": 3}
                ],
            },
            {"cell_type": "markdown", "id": "b2", "metadata": {}, "source": "# hi"},
        ],
        "metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {}}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "x.ipynb"
    path.write_text(json.dumps(nb))
    assert subprocess.run([*NBSTRIPOUT, "--verify", str(path)], capture_output=True).returncode == 1
    subprocess.run([*NBSTRIPOUT, str(path)], check=True)
    clean = json.loads(path.read_text())
    assert "widgets" not in clean["metadata"] and clean["cells"][0]["execution_count"] is None
    assert clean["cells"][0]["outputs"] == [] and clean["cells"][1]["source"] == ["# hi"]
    assert subprocess.run([*NBSTRIPOUT, "--verify", str(path)], capture_output=True).returncode == 0
