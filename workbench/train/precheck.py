"""Build a config's data and model once before a launch, in a short-lived child process, and say
what a rank will need: the launcher's pre-launch check (workbench.distributed.limits) runs it so a
user's model that cannot be imported, fails when called, returns the wrong type or does not fit
the data is a one-line error before any rank starts, and the kernel never runs that code itself.

    python -m workbench.train.precheck RUN_DIR/config.json     # or '-' for stdin; one JSON line

What it measures, on this machine: the memory of a process that has imported torch (what every
rank pays before its model), what building the data added, the model's parameters (built on the
meta device first, so a model too big to build costs nothing), and, for models small enough to build
for real, the bytes autograd saves for backward per sample (a real forward and backward on a few
samples, train.checkpoint's modules checkpointed as the run will have them), and the layers of the
model's first nn.ModuleList (its blocks: what the tune may checkpoint). It counts no FLOPs: the
first FLOP count in a process costs seconds, too slow here.
"""

from __future__ import annotations

import json
import sys
import time

T0 = time.time()

import torch  # noqa: E402 - the cost every rank pays, measured below

from ..config import ConfigError, RunConfig  # noqa: E402
from ..disk import keep_writes_to_owner  # noqa: E402
from ..machine.capability import resolve_device  # noqa: E402
from .data import build_data  # noqa: E402
from .factory import load_factory  # noqa: E402
from .flops import first_batch  # noqa: E402
from .memory_readings import rss_gib  # noqa: E402
from .contract import ContractError  # noqa: E402
from .models import build_model, loss_fn  # noqa: E402
from .precision import autocast  # noqa: E402
from .sharding import block_names, check_shardable, layer_blocks  # noqa: E402
from .activation_checkpointing import apply_checkpointing  # noqa: E402
from .footprint import saved_activations  # noqa: E402

GIB = 2**30
REAL_BUILD_MAX_PARAMS = 50_000_000  # above this the activations are not measured (and said so)
SAMPLES = 4  # a forward and backward on this many samples measures activations per sample


def _build(cfg: RunConfig, data, meta: bool):
    if not meta:
        try:
            return build_model(cfg, data)  # with the contract check on one batch
        except ContractError as e:
            raise ConfigError(f"model.name {cfg.model.name!r}: {e} (checked before launch)") from None
    with torch.device("meta"):
        return build_model(cfg, data, check=False)


def _model(cfg: RunConfig, data) -> tuple:
    """(the model, built on the meta device?): meta first; a factory that cannot build there is
    built for real."""
    try:
        return _build(cfg, data, meta=True), True
    except ConfigError:
        return _build(cfg, data, meta=False), False


def measure(cfg: RunConfig) -> dict:
    torch.set_num_threads(1)
    out = {"torch_import_s": round(time.time() - T0, 3), "base_rss_gib": round(rss_gib(), 4)}
    if ":" in cfg.model.name:  # a missing file or a syntax error: said before the data is built
        load_factory(cfg.model.name)
    rss = rss_gib()
    data = build_data(cfg)
    out.update(
        data_rss_gib=round(max(0.0, rss_gib() - rss), 4), train_samples=len(data.train), task=data.task
    )
    model, on_meta = _model(cfg, data)  # a factory's call and its return type, given the data
    if cfg.distributed.strategy == "fsdp":  # what will be sharded, said before launch
        check_shardable(model)
        out["fsdp_blocks"] = block_names(model, cfg.distributed.fsdp_blocks)
    out["layer_blocks"] = layer_blocks(model)  # what the tune may checkpoint
    out["image_weights"] = any(p.dim() == 4 for p in model.parameters())  # what channels_last reorders
    params = sum(p.numel() for p in model.parameters())
    out.update(params=params, param_bytes=sum(p.numel() * p.element_size() for p in model.parameters()))
    if params > REAL_BUILD_MAX_PARAMS:
        out["activations_note"] = (
            f"activations not measured: the model has {params:,} parameters, "
            f"more than {REAL_BUILD_MAX_PARAMS:,} worth building here"
        )
        return out
    if on_meta:
        torch.manual_seed(cfg.run.seed)
        model = _build(cfg, data, meta=False)
    n = max(1, min(SAMPLES, cfg.loader.batch_size, len(data.train)))
    x, y = first_batch(data.train, n, torch.device("cpu"))
    try:  # the activations of the run as configured: checkpointed modules keep only their inputs
        names = apply_checkpointing(model, cfg.train.checkpoint)
        saved = saved_activations(
            model.train(), x, y, loss_fn(data.task), autocast(cfg, torch.device("cpu")), names, backward=True
        )["total"]
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - the model and the data do not fit together
        why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if resolve_device(cfg.run.device).type == "cuda":  # it may need the GPU it will run on
            out["activations_note"] = f"activations not measured: a forward pass on the CPU failed: {why}"
            return out
        raise ConfigError(
            f"model.name {cfg.model.name!r}: a forward and backward pass on {n} "
            f"sample(s) of data.name {cfg.data.name!r} failed before launch: {why}"
        ) from None
    out["activation_bytes_per_sample"] = saved / len(x)
    return out


def main(argv: list[str] | None = None) -> int:
    keep_writes_to_owner()  # the cached data it may write, whatever the umask
    argv = sys.argv[1:] if argv is None else argv
    text = sys.stdin.read() if argv[0] == "-" else None  # a spare check waits here, imports done
    t_config = time.time()
    try:
        cfg = RunConfig.from_json(text) if text is not None else RunConfig.load(argv[0])
        result = {"ok": True, **measure(cfg)}
    except ConfigError as e:
        result = {"ok": False, "error": str(e)}
    except Exception as e:  # noqa: BLE001 - a corrupt image, a broken data set: one line, not a traceback
        result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    result["seconds"] = round(time.time() - t_config, 3)  # checking this config, imports excluded
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
