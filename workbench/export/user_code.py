"""What an exported `train.py` needs for a user's own model or Dataset: the code behind
model.name and data.factory copied next to it (with the local modules it imports, see carry.py),
the factory loader, and the contract's own functions copied as source (the data facts a factory
asks for, the output adapter), so the script builds the model exactly as the workbench does.

    specs, files, installed = copy_user_code(cfg, to_dir)   # {'model.name': 'resnet.py:build'}
"""

from __future__ import annotations

import inspect
from pathlib import Path

from ..config import ConfigError, RunConfig
from ..train import contract as wb_contract
from ..train import data as wb_data
from .carry import carry

LOAD_FACTORY = '''

def load_factory(spec, field="model.name"):
    """Resolve "package.module:factory" or "file.py:factory": a file next to this script first
    (the export carries the user's files and their local modules here), then from the current
    folder."""
    target, _, attr = spec.rpartition(":")
    if target.endswith(".py"):
        path = HERE / target if (HERE / target).is_file() else Path(target).resolve()
        mod_spec = importlib.util.spec_from_file_location(f"user_code_{path.stem}", path)
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[mod_spec.name] = module
        mod_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    return getattr(module, attr)
'''

BUILD_USER_MODEL = """factory = load_factory(m.name)
    model = factory(**factory_kwargs(factory, m.kwargs, data_facts(data)))
    fit_output(model, sample_batch(data.train, 2)[0])  # the contract's output adapter
    return model"""

FIELDS = ("model.name", "data.factory")


def _source(*objects) -> str:
    return "\n\n".join(inspect.getsource(o).rstrip() for o in objects)


def uses_user_code(cfg: RunConfig) -> bool:
    return ":" in cfg.model.name or cfg.data.name == "dataset"


def user_code(cfg: RunConfig) -> str:
    """The loader and the contract's functions, as the script's source."""
    c = wb_contract
    return "\n\n\n".join(
        [
            LOAD_FACTORY.strip(),
            f"FACTS = {c.FACTS!r}",
            _source(
                wb_data.sample_batch,
                c.data_facts,
                c.factory_kwargs,
                c.output_adapter,
                c.TakeLogits,
                c.attach_adapter,
                c._forward_once,
                c.fit_output,
            ),
        ]
    )


def dataset_code() -> str:
    """A user's Dataset, split and batched as the workbench does it."""
    return _source(wb_data.user_dataset)


def copy_user_code(cfg: RunConfig, to_dir: Path) -> tuple[dict, list[Path], list[str]]:
    """Copy the code behind model.name and data.factory into `to_dir`: the new specs by field,
    the files copied, and the outside packages that code imports (the cluster needs them)."""
    if cfg.data.name == "image_folder":
        raise ConfigError(
            "data.name 'image_folder' is not exported: the script carries the "
            "built-in data sets and your own Dataset (data.name 'dataset'); wrap the "
            "folder in a Dataset factory and export that"
        )
    specs, files, installed = {}, [], set()
    wanted = {
        "model.name": cfg.model.name if ":" in cfg.model.name else None,
        "data.factory": cfg.data.factory if cfg.data.name == "dataset" else None,
    }
    for field, spec in wanted.items():
        if spec:
            carried = carry(spec, field, to_dir)
            specs[field] = carried.spec
            files += [f for f in carried.files if f not in files]
            installed.update(carried.installed)
    return specs, files, sorted(installed - {"torch"})
