"""When the code a run folder names may run: the trust rule, in one place.

Reading a run folder (listing, comparing, attaching, exporting) never imports anything. Loading its
model or data (load_model, `workbench prune/quant --run-dir`, the inference study) would call the
factories its config names, so it runs them only when the folder is trusted: this user's workbench
created it on this machine and its config and the code it names are unchanged
(workbench.provenance: created_here, code_changed), or the
user says so with trust_code=True (`--trust-code`), as with Hugging Face's trust_remote_code.
Built-in models and data name no code and need no trust; stdlib factories are refused always
(workbench.train.factory).

    check_trust(run_dir, cfg, trust_code=False)   # ConfigError naming the factory, or its description
"""

from __future__ import annotations

import json
from pathlib import Path

from ..config import ConfigError, RunConfig
from ..provenance import code_changed, created_here, named_code
from .factory import check_spec


def describe(code: list[tuple[str, str, dict]]) -> str:
    return "; ".join(
        f"{field} {spec!r} called with {json.dumps(kwargs, sort_keys=True)}" for field, spec, kwargs in code
    )


def check_trust(run_dir: str | Path, cfg: RunConfig, trust_code: bool = False) -> str:
    """Raise ConfigError, before anything is imported, when loading `run_dir` would run code the
    user has not agreed to; else return what will run ("" when nothing but the workbench's own)."""
    code = named_code(cfg)
    if not code:
        return ""
    for field, spec, _ in code:
        check_spec(spec, field)
    text = describe(code)
    if trust_code:
        return f"will run {text}"
    if created_here(run_dir):
        changed = code_changed(run_dir, cfg)
        if changed is None:
            return f"will run {text}"
        raise ConfigError(
            f"run folder {str(run_dir)!r} was made here, but {changed}, and loading it would run "
            f"that code: {text}. Nothing was run; read that code, then pass trust_code=True "
            "(--trust-code on the command line) to run it"
        )
    raise ConfigError(
        f"run folder {str(run_dir)!r} was not created by this workbench on this machine (or its "
        f"config was changed since), and loading it would run its code: {text}. Nothing was run; "
        "read that code, then pass trust_code=True (--trust-code on the command line) to run it"
    )
