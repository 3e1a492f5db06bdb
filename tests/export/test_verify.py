"""The reproduction check reports a script that fails, with its exit code and output."""

from __future__ import annotations


import pytest

from workbench.config import RunConfig
from workbench.export import export
from workbench.export.verify import reproduce


def test_reproduce_reports_a_failing_script(tmp_path):
    export(RunConfig.smoke(), tmp_path)
    (tmp_path / "train.py").write_text("import sys\nprint('broken on purpose')\nsys.exit(3)\n")
    with pytest.raises(RuntimeError, match=r"(?s)failed \(exit code 3\).*broken on purpose"):
        reproduce(tmp_path)
