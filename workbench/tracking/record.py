"""What a tracked script's run folder says of the script (script.json): its command, its own
settings as flat JSON data, and the shape a listing shows. Plain data: nothing in it names code
the workbench would import."""

from __future__ import annotations

import os
import sys
import time

from ..config import ConfigError


def script_record(
    config,
    argv: list[str],
    label: str,
    world_size: int,
    *,
    model=None,
    precision=None,
    batch_size=None,
    steps=None,
) -> dict:
    """What script.json says of the script: its command, its own settings (`config`), and the
    shape a listing shows."""
    params = params_of(config)
    if _is_run_config(config):
        model = model or config.model.name
        precision = precision or config.precision.dtype
        batch_size = batch_size or config.loader.batch_size
        steps = steps or config.run.steps
    return {
        "command": list(argv),
        "cwd": os.getcwd(),
        "python": sys.executable,
        "label": label,
        "params": params,
        "model": model or label,
        "precision": precision,
        "ranks": world_size,
        "batch_size": batch_size,
        "steps": steps,
        "t": round(time.time(), 3),
        "tags": {},
    }


def _is_run_config(config) -> bool:
    from ..config import RunConfig

    return isinstance(config, RunConfig)


def params_of(config) -> dict:
    """The script's settings as flat, JSON-safe data: from a dict, an argparse Namespace, a
    dataclass or a RunConfig; a one-line ConfigError for anything else."""
    import argparse
    import dataclasses

    if config is None:
        return {}
    if _is_run_config(config):
        data = config.to_dict()
    elif isinstance(config, argparse.Namespace):
        data = vars(config)
    elif dataclasses.is_dataclass(config) and not isinstance(config, type):
        data = dataclasses.asdict(config)
    elif isinstance(config, dict):
        data = config
    else:
        raise ConfigError(
            f"config must be a dict, an argparse.Namespace, a dataclass or a "
            f"RunConfig, got {type(config).__name__}"
        )
    return flatten(data)


MAX_DEPTH = 32  # levels of sections in a script's own config: deeper is a mistake (or a cycle)


def flatten(data: dict, prefix: str = "", _inside: tuple = ()) -> dict:
    """{'optim': {'lr': 0.1}} -> {'optim.lr': 0.1}; values that are not JSON become their text. A
    config that holds itself, or is nested past MAX_DEPTH, is a one-line ConfigError."""
    if id(data) in _inside:
        raise ConfigError(
            f"track(config=...): {prefix.rstrip('.')} holds the config it is inside; pass plain values"
        )
    if len(_inside) >= MAX_DEPTH:
        raise ConfigError(f"track(config=...): {prefix.rstrip('.')} is nested over {MAX_DEPTH} levels deep")
    out = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + ".", (*_inside, id(data))))
        elif value is None or isinstance(value, (bool, int, float, str)):
            out[name] = value
        elif isinstance(value, (list, tuple)) and all(
            v is None or isinstance(v, (bool, int, float, str)) for v in value
        ):
            out[name] = list(value)
        else:
            out[name] = str(value)
    return out
