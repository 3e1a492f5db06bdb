"""The page evaluates plotly's bundle as a function, at the moment it decides to: the rewrite of
the module's last export into a return, checked by running the result in node where it is here."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from workbench.ui.figure import PLOTLY_BUNDLE, PlotlyCode, bundle_as_function


def test_a_module_ending_in_one_export_returns_what_it_exported():
    body = bundle_as_function(
        "const a = 1; let b = () => a + 1;\nexport { a as default, b };\n/*! licence */\n"
    )
    assert body.startswith('"use strict";')
    assert body.rstrip().endswith('return {"default": a, "b": b};')


def test_a_module_that_exports_elsewhere_is_left_a_module():
    assert bundle_as_function("export const a = 1;\nconsole.log(a);\n") is None
    code = PlotlyCode.of_bundle(figures=1)
    assert code.as_function and code.figures == 1


@pytest.mark.skipif(shutil.which("node") is None, reason="no node on this machine")
def test_the_rewritten_function_runs_and_returns_the_modules_exports():
    body = bundle_as_function("const x = 2;\nfunction f() { return x * 3; }\nexport{f as default,x};")
    script = f"const m = new Function({json.dumps(body)})(); console.log(m.default(), m.x);"
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["6", "2"]


@pytest.mark.skipif(shutil.which("node") is None, reason="no node on this machine")
def test_plotlys_own_bundle_compiles_as_a_function():
    body = bundle_as_function(PLOTLY_BUNDLE.read_text(encoding="utf-8"))
    assert body is not None, "plotly's bundle no longer ends in one export: the page imports it"
    script = "const fs = require('fs'); new Function(fs.readFileSync(0, 'utf8')); console.log('ok')"
    out = subprocess.run(["node", "-e", script], input=body, capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
