"""RunConfig: the one config object that widgets edit, the CLI builds and workers read.

A tree of frozen dataclasses. Every value is checked once, when its section is built (types from
the annotations, ranges in each section's `_check`; the root adds the rules across sections), and
errors name the dotted field, the bad value and what is allowed: "loader.num_workers must be >= 0,
got -1". Unknown keys are refused. Frozen, so a RunConfig is valid for its whole life: nothing
downstream checks it again; `replace` makes a changed, checked copy. The widgets' options and the
CLI's choices come from the annotations (`choices`).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

from .disk import write_atomic

Precision = Literal["fp32", "bf16", "fp16"]
BUILTIN_MODELS = ("mlp", "cnn", "transformer")
BUILTIN_DATA = ("digits", "synthetic_images", "text", "image_folder", "dataset")
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".webp")  # what an image folder may hold


class ConfigError(ValueError):
    """A config value is not allowed. The message names the dotted field."""


SHOWN_CHARS = 80  # a value longer than this is cut in messages, with its length said


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """`value` as a message shows it: its repr, cut to its first `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def error_line(e: BaseException, limit: int = 200) -> str:
    """An exception as a message shows it: its type and the first line of what it says, cut."""
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return f"{type(e).__name__}: {first[:limit]}"


FILE_FIELDS = ("model.name", "data.factory", "data.path")  # fields that may name a file or folder


def _fail(path: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{path} must be {allowed}, got {shown(value)}")


def _at_least(path: str, value: float, low: float) -> None:
    if value < low:
        _fail(path, value, f">= {low}")


class _Section:
    """Shared build/validate/serialise behaviour of every config section."""

    _path: ClassVar[str] = ""  # dotted prefix of this section inside RunConfig

    def __post_init__(self) -> None:
        self._validate()

    def _validate(self) -> None:
        """Check this section's own values (a section inside it was checked when it was built)."""
        hints = _hints(type(self))
        prefix = f"{self._path}." if self._path else ""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            hint = hints[f.name]
            if isinstance(hint, type) and issubclass(hint, _Section):
                if not isinstance(value, hint):
                    _fail(prefix + f.name, value, f"a {hint.__name__}")
            else:
                _check_type(prefix + f.name, value, hint)
        self._check(prefix)

    def _check(self, prefix: str) -> None:  # ranges and cross-field rules
        pass

    @classmethod
    def from_dict(cls, data: Any):
        prefix = f"{cls._path}." if cls._path else ""
        if not isinstance(data, dict):
            _fail(cls._path or "config", data, "a JSON object")
        hints = _hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        for key in data:
            if key not in names:
                close = difflib.get_close_matches(str(key), names, n=1)
                hint = f" (did you mean '{prefix}{close[0]}'?)" if close else ""
                raise ConfigError(f"unknown config key '{prefix}{key}'{hint}; allowed: {', '.join(names)}")
        kwargs = {}
        for key, value in data.items():
            sub = hints[key]
            is_section = isinstance(sub, type) and issubclass(sub, _Section)
            kwargs[key] = sub.from_dict(value) if is_section else value
        return cls(**kwargs)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


_HINTS: dict[type, dict] = {}


def _hints(cls: type) -> dict:
    """A section's resolved annotations (resolved once: get_type_hints evaluates strings)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _check_type(path: str, value: Any, hint: Any) -> None:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is Literal:
        if value not in args:
            _fail(path, value, "one of " + ", ".join(repr(a) for a in args))
        return
    if origin is typing.Union:  # Optional[X]
        if value is None and type(None) in args:
            return
        inner = [a for a in args if a is not type(None)]
        return _check_type(path, value, inner[0])
    if hint is bool:
        if not isinstance(value, bool):
            _fail(path, value, "true or false")
    elif hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(path, value, "an integer")
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            _fail(path, value, "a finite number")
    elif hint is str:
        if not isinstance(value, str):
            _fail(path, value, "a string")
    elif origin is dict or hint is dict:
        if not isinstance(value, dict):
            _fail(path, value, "a JSON object")
        _check_plain(path, value)
    elif origin is list:  # list[str]: every item checked, the error names its index
        if not isinstance(value, list):
            _fail(path, value, f"a list of {args[0].__name__}")
        for i, item in enumerate(value):
            _check_type(f"{path}[{i}]", item, args[0])


MAX_NESTING = 32  # levels of lists and objects in a config value: deeper is a mistake, and breaks copies


def _check_plain(path: str, value: Any, depth: int = 0) -> None:
    """Data, never code: strings, numbers, booleans, null, lists and objects with string keys,
    nested at most MAX_NESTING deep."""
    if depth > MAX_NESTING:
        head = path.split(".")[0] + "." + path.split(".")[1] if path.count(".") else path
        raise ConfigError(f"{head} must be nested at most {MAX_NESTING} levels deep, got deeper")
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            _fail(path, value, "a finite number")
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_plain(f"{path}[{i}]", v, depth + 1)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                _fail(path, k, "an object with string keys")
            _check_plain(f"{path}.{k}", v, depth + 1)
        return
    _fail(path, value, "plain JSON data (strings, numbers, booleans, null, lists, objects)")


@dataclass(frozen=True)
class ModelConfig(_Section):
    _path: ClassVar[str] = "model"
    # A built-in name, or a user's factory: "package.module:factory" or "path/to/file.py:factory".
    name: str = "mlp"
    width: int = 256  # a built-in model's hidden size (MLP units, CNN channels, transformer d_model)
    depth: int = 3  # a built-in model's layers (MLP hidden layers, CNN blocks, transformer blocks)
    heads: int = 4  # transformer only
    kwargs: dict = field(default_factory=dict)  # passed to a user's factory

    def _check(self, p: str) -> None:
        if self.name not in BUILTIN_MODELS and ":" not in self.name:
            _fail(
                p + "name",
                self.name,
                f"one of {', '.join(BUILTIN_MODELS)} or an import path 'package.module:factory' "
                "or 'path/to/file.py:factory'",
            )
        _at_least(p + "width", self.width, 1)
        _at_least(p + "depth", self.depth, 1)
        _at_least(p + "heads", self.heads, 1)
        if self.name == "transformer" and self.width % self.heads:
            _fail(p + "width", self.width, f"a multiple of model.heads ({self.heads}) for the transformer")


@dataclass(frozen=True)
class DataConfig(_Section):
    _path: ClassVar[str] = "data"
    # The data: scikit-learn's 8x8 digits, generated images, a generated text corpus, a folder of
    # images, or your own Dataset (data.factory).
    name: Literal["digits", "synthetic_images", "text", "image_folder", "dataset"] = "digits"
    image_size: int = 32  # synthetic_images; image_folder resizes images stored at another size
    channels: int = 3  # synthetic_images
    num_classes: int = 10  # synthetic_images; dataset without a `classes` attribute
    num_samples: int = 4096  # synthetic_images, text sequences
    seq_len: int = 64  # text
    test_fraction: float = 0.22  # the share held out for evaluation
    path: str = ""  # image_folder: ROOT holding ROOT/<class>/<image>.png
    factory: str = ""  # dataset: "package.module:factory" or "path/to/file.py:factory"
    kwargs: dict = field(default_factory=dict)  # dataset: passed to the factory
    on_error: Literal["raise", "skip"] = "raise"  # image_folder: a corrupt file stops or is skipped

    def _check(self, p: str) -> None:
        _at_least(p + "image_size", self.image_size, 4)
        _at_least(p + "channels", self.channels, 1)
        _at_least(p + "num_classes", self.num_classes, 2)
        _at_least(p + "num_samples", self.num_samples, 8)
        _at_least(p + "seq_len", self.seq_len, 2)
        if not 0 < self.test_fraction < 1:
            _fail(p + "test_fraction", self.test_fraction, "between 0 and 1 (exclusive)")
        if self.name == "image_folder" and not self.path:
            _fail(
                p + "path",
                self.path,
                "a folder of images ROOT/<class>/<image>.png when data.name is "
                "'image_folder' (make one with `workbench loader make-images DIR`)",
            )
        if self.name == "dataset":
            target, sep, attr = self.factory.rpartition(":")
            if not sep or not target or not attr.isidentifier():
                _fail(
                    p + "factory",
                    self.factory,
                    "an import path 'package.module:factory' or "
                    "'path/to/file.py:factory' returning a torch Dataset (data.name is 'dataset')",
                )


@dataclass(frozen=True)
class LoaderConfig(_Section):
    _path: ClassVar[str] = "loader"
    batch_size: int = 64  # samples per step on each rank
    num_workers: int = 0  # loader worker processes per rank; 0 loads in the training process
    pin_memory: bool = False  # page-locked batches for faster host-to-GPU copies (a GPU only)
    prefetch_factor: Optional[int] = None  # batches each worker loads ahead; null: torch's default
    persistent_workers: bool = False  # keep the workers between epochs instead of starting them again

    def _check(self, p: str) -> None:
        _at_least(p + "batch_size", self.batch_size, 1)
        _at_least(p + "num_workers", self.num_workers, 0)
        if self.prefetch_factor is not None:
            _at_least(p + "prefetch_factor", self.prefetch_factor, 1)
            if self.num_workers == 0:
                raise ConfigError(
                    f"{p}prefetch_factor needs {p}num_workers >= 1, got "
                    f"prefetch_factor={self.prefetch_factor} with num_workers=0; "
                    "set prefetch_factor to null or add workers"
                )
        if self.persistent_workers and self.num_workers == 0:
            raise ConfigError(f"{p}persistent_workers needs {p}num_workers >= 1, got num_workers=0")


@dataclass(frozen=True)
class OptimConfig(_Section):
    _path: ClassVar[str] = "optim"
    name: Literal["adamw", "sgd"] = "adamw"  # the optimizer
    lr: float = 1e-3  # the learning rate
    weight_decay: float = 0.0  # decoupled (AdamW) or L2 (SGD) weight decay
    momentum: float = 0.9  # sgd only
    grad_accum_steps: int = 1  # micro-batches whose gradients add up to one optimizer step
    grad_clip: Optional[float] = None  # clip the gradients' total norm to this; null: no clipping
    # How the optimizer loops over parameters: torch's choice, one kernel per tensor ("for-loop"),
    # multi-tensor ("foreach"), or one fused kernel ("fused", refused where this device lacks it).
    impl: Literal["auto", "for-loop", "foreach", "fused"] = "auto"

    def _check(self, p: str) -> None:
        if not self.lr > 0:
            _fail(p + "lr", self.lr, "> 0")
        _at_least(p + "weight_decay", self.weight_decay, 0)
        if not 0 <= self.momentum < 1:
            _fail(p + "momentum", self.momentum, "in [0, 1)")
        _at_least(p + "grad_accum_steps", self.grad_accum_steps, 1)
        if self.grad_clip is not None and not self.grad_clip > 0:
            _fail(p + "grad_clip", self.grad_clip, "> 0 or null")


@dataclass(frozen=True)
class PrecisionConfig(_Section):
    _path: ClassVar[str] = "precision"
    dtype: Precision = "fp32"  # the compute precision: bf16 and fp16 run under autocast (fp16 with a scaler)
    tf32: bool = False  # CUDA, compute capability >= 8.0
    channels_last: bool = False  # image models


@dataclass(frozen=True)
class DistributedConfig(_Section):
    _path: ClassVar[str] = "distributed"
    nproc: int = 1  # processes per node
    nnodes: int = 1  # machines in a multi-node run
    node_rank: int = 0  # this machine's index, 0 to nnodes - 1
    rdzv_endpoint: Optional[str] = None  # "host:port"; None on one node: loopback, free port
    backend: Literal["auto", "gloo", "nccl"] = "auto"  # auto: nccl on GPUs, gloo on CPUs
    # How often torchrun restarts every rank after a failure (from the newest saved state, with
    # run.save_every).
    max_restarts: int = 0
    timeout_s: float = 60.0  # collective timeout: a hang is reported in about this long
    start_timeout_s: float = 120.0  # every rank must report ready within this
    strategy: Literal["ddp", "fsdp"] = "ddp"  # fsdp: FSDP2 (fully_shard) per block, then the root
    fsdp_blocks: list[str] = field(default_factory=list)  # module names/patterns; [] = the rule
    reshard_after_forward: bool = True  # fsdp: free gathered parameters after each block's forward
    fsdp_mixed_precision: bool = False  # fsdp: bf16 parameters in compute, fp32 gradient reduction
    cpu_offload: bool = False  # fsdp: keep parameter shards, gradients and optimizer state on the CPU

    def _check(self, p: str) -> None:
        _at_least(p + "nproc", self.nproc, 1)
        _at_least(p + "nnodes", self.nnodes, 1)
        if not 0 <= self.node_rank < self.nnodes:
            _fail(p + "node_rank", self.node_rank, f"in [0, {self.nnodes - 1}] for nnodes={self.nnodes}")
        _at_least(p + "max_restarts", self.max_restarts, 0)
        if not self.timeout_s > 0:
            _fail(p + "timeout_s", self.timeout_s, "> 0")
        if not self.start_timeout_s > 0:
            _fail(p + "start_timeout_s", self.start_timeout_s, "> 0")
        if self.rdzv_endpoint is not None:
            host, sep, port = self.rdzv_endpoint.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                _fail(p + "rdzv_endpoint", self.rdzv_endpoint, "'host:port' with a port in 1..65535")
        elif self.nnodes > 1:
            raise ConfigError(
                f"{p}rdzv_endpoint is needed when {p}nnodes > 1 "
                f"(got nnodes={self.nnodes}); give the 'host:port' of node 0"
            )
        if self.strategy != "fsdp":
            for name, off in (
                ("fsdp_blocks", []),
                ("reshard_after_forward", True),
                ("fsdp_mixed_precision", False),
                ("cpu_offload", False),
            ):
                if getattr(self, name) != off:
                    _fail(p + name, getattr(self, name), f"{json.dumps(off)} unless {p}strategy is 'fsdp'")

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes


@dataclass(frozen=True)
class CompileConfig(_Section):
    _path: ClassVar[str] = "compile"
    enabled: bool = False  # run the step through torch.compile
    mode: Literal["default", "reduce-overhead", "max-autotune"] = "default"  # torch.compile's mode


@dataclass(frozen=True)
class TrainSection(_Section):
    _path: ClassVar[str] = "train"
    # Activation checkpointing: module names (or patterns, one '*' per name part: "blocks.layers.*")
    # whose activations are recomputed in backward instead of kept; [] is off.
    checkpoint: list[str] = field(default_factory=list)

    def _check(self, p: str) -> None:
        for i, name in enumerate(self.checkpoint):
            if not name or any(c.isspace() for c in name):
                _fail(
                    f"{p}checkpoint[{i}]",
                    name,
                    "a module name such as 'blocks.layers.0' or 'blocks.layers.*' (no spaces)",
                )


@dataclass(frozen=True)
class RunSection(_Section):
    _path: ClassVar[str] = "run"
    steps: int = 300  # the most steps a run takes
    time_budget_s: float = 0.0  # > 0: the run also ends once its steps have taken this many seconds
    seed: int = 0  # seeds the model's weights and the data's order (the train/test split is fixed)
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: a CUDA GPU where there is one, else the CPU
    label: str = ""  # the run folder's name after its time; "": the model, precision and ranks
    runs_dir: str = "runs"  # where run folders go ($WORKBENCH_RUNS, when set, comes first)
    eval_batches: int = 20  # at the end of training; 0 skips evaluation
    mem_every_s: float = 0.5  # memory is sampled on a timer, not every step
    save_weights: bool = True  # rank 0 writes the trained weights (model.pt) at the end
    threads: int = 0  # intra-op threads per process; 0: this node's usable cores shared by its ranks
    profile_steps: int = 0  # steps right after warm-up run under torch.profiler (marked, not timed)
    oversubscribe: bool = False  # run even when ranks x threads or loader workers outnumber the cores
    warm_worker: bool = True  # hand the run to a spare, pre-imported worker when one is ready
    save_every: int = 0  # > 0: keep a resumable state every N steps; a restart resumes from it
    resume_from: str = ""  # a run folder whose saved state this run goes on from (run --resume)
    # the memory allocator the run's processes start with (workbench.machine.allocator); auto:
    # tcmalloc where it is installed, else the C library's
    allocator: Literal["auto", "system", "tcmalloc"] = "auto"

    def planned_steps(self) -> int | None:
        """The steps a run takes, when known before it starts (None: a time budget may end it)."""
        return None if self.time_budget_s else self.steps

    def _check(self, p: str) -> None:
        _at_least(p + "steps", self.steps, 1)
        _at_least(p + "profile_steps", self.profile_steps, 0)
        _at_least(p + "save_every", self.save_every, 0)
        if self.profile_steps > self.steps // 2:
            _fail(
                p + "profile_steps",
                self.profile_steps,
                f"<= run.steps // 2 ({self.steps // 2}), so "
                "warm-up and unprofiled steps remain for the run's own figures",
            )
        _at_least(p + "threads", self.threads, 0)
        if not (math.isfinite(self.time_budget_s) and self.time_budget_s >= 0):
            _fail(p + "time_budget_s", self.time_budget_s, "a number of seconds >= 0 (0: no budget)")
        _at_least(p + "seed", self.seed, 0)
        _at_least(p + "eval_batches", self.eval_batches, 0)
        if not self.mem_every_s > 0:
            _fail(p + "mem_every_s", self.mem_every_s, "> 0")
        if len(self.label) > 60 or any(c in self.label for c in "/\\\0"):
            _fail(p + "label", self.label, "at most 60 characters without '/', '\\'")


def matching_data(model: str, data: str) -> str:
    """The data a model can train on, keeping `data` when it fits. The one rule that reconciles
    model and data: RunConfig refuses a mismatch it is given; the CLI and the controls, when only
    the model was chosen, take the data this returns."""
    if model == "transformer":
        return "text"
    if model in ("mlp", "cnn") and data == "text":
        return "digits"
    return data


@dataclass(frozen=True)
class RunConfig(_Section):
    """The whole config of a run: one frozen, checked section for each part of it (see the module).

    :param model: the model to train, a built-in one or a user's factory (default: the 256-wide MLP).
    :param data: the data it trains and evaluates on (default: scikit-learn's 8x8 digits).
    :param loader: the batch size per rank and the data loader's workers (default: 64, no workers).
    :param optim: the optimizer, its learning rate and its gradient settings (default: AdamW, 1e-3).
    :param precision: the compute precision, TF32 and the channels-last layout (default: fp32).
    :param distributed: the processes, nodes and strategy, DDP or FSDP (default: one process).
    :param compile: whether the step runs through torch.compile, and its mode (default: off).
    :param train: the modules whose activations are recomputed in backward (default: none).
    :param run: the steps, time budget, seed, device, run folder, saving and threads
        (default: 300 steps, no time budget).
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    train: TrainSection = field(default_factory=TrainSection)
    run: RunSection = field(default_factory=RunSection)

    def _check(self, p: str) -> None:
        self._check_fsdp()
        if matching_data(self.model.name, self.data.name) == self.data.name:
            return
        if self.model.name == "transformer":
            raise ConfigError(f"model.name 'transformer' needs data.name 'text', got {self.data.name!r}")
        raise ConfigError(
            f"data.name 'text' needs model.name 'transformer' or your own model, got {self.model.name!r}"
        )

    def _check_fsdp(self) -> None:
        """What the workbench's FSDP path does not do yet, refused in one line."""
        if self.distributed.strategy != "fsdp":
            return
        clash = {
            "precision.dtype": (
                self.precision.dtype == "fp16",
                "'fp32' or 'bf16' (fp16's gradient scaler is not sharded)",
            ),
            "optim.grad_accum_steps": (self.optim.grad_accum_steps > 1, "1"),
            "compile.enabled": (self.compile.enabled, "false"),
            "run.profile_steps": (
                self.run.profile_steps > 0,
                "0 (the profiler's memory breakdown reads parameter storage that FSDP frees)",
            ),
        }
        for name, (bad, allowed) in clash.items():
            if bad:
                section, leaf = name.split(".")
                raise ConfigError(
                    f"{name} must be {allowed} with distributed.strategy 'fsdp', got "
                    f"{getattr(getattr(self, section), leaf)!r}"
                )

    # --- presets -------------------------------------------------------------------------
    @classmethod
    def default(cls) -> "RunConfig":
        """Real work on a CPU in well under a minute: a 512-wide MLP on the digits data."""
        return cls(
            model=ModelConfig(name="mlp", width=512, depth=3),
            loader=LoaderConfig(batch_size=128),
            run=RunSection(steps=300),
        )

    @classmethod
    def smoke(cls) -> "RunConfig":
        """Tiny and fast, for tests and first looks: seconds on any CPU."""
        return cls(
            model=ModelConfig(name="mlp", width=64, depth=2),
            loader=LoaderConfig(batch_size=32),
            run=RunSection(steps=20, eval_batches=2),
        )

    # --- (de)serialisation ---------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RunConfig":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"config is not valid JSON: {e}") from None
        except RecursionError:
            raise ConfigError(
                "config is not a config: its JSON is nested too deeply to read (a "
                "config is a few levels of sections)"
            ) from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> "RunConfig":
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(
                f"config file {str(path)!r} is not UTF-8 text (byte {raw[e.start]:#04x} "
                f"at position {e.start}): a config is a JSON file"
            ) from None
        return cls.from_json(text)

    @classmethod
    def from_file(cls, path: str | Path) -> "RunConfig":
        """A config file a person names (`--config FILE`). Its relative file paths (the file of a
        "file.py:factory" in model.name or data.factory, and data.path) are looked up beside FILE
        first, where an export keeps its copies, then in the working folder; one found beside
        FILE becomes absolute, so the config runs from any folder. (`load` reads a run folder's
        config as written: its paths are relative to the launch's working folder.)

        :param path: the JSON config file; one that is missing or not UTF-8 JSON is a ConfigError.
        """
        cfg = cls.load(path)
        here = Path(path).resolve().parent
        data = cfg.to_dict()
        changes = {}
        for name in FILE_FIELDS:
            section, key = name.split(".")
            value = data[section][key]
            target, colon, attr = value.rpartition(":") if name != "data.path" else (value, "", "")
            if name != "data.path" and not target.endswith(".py"):
                continue  # a built-in name or a module path: nothing on disk to find
            if target and not Path(target).is_absolute() and (here / target).exists():
                changes[name] = f"{here / target}{colon}{attr}"
        return cfg.replace(**changes) if changes else cfg

    def save(self, path: str | Path) -> None:
        """Write atomically, so a reader never sees half a config (workbench.disk.write_atomic)."""
        write_atomic(path, self.to_json())

    def differences(self, other: "RunConfig") -> dict[str, tuple[Any, Any]]:
        """The dotted fields in which `other` differs from this config: {field: (ours, theirs)}."""
        ours, theirs = self.to_dict(), other.to_dict()
        return {
            f"{section}.{key}": (value, theirs[section][key])
            for section, fields in ours.items()
            if isinstance(fields, dict)
            for key, value in fields.items()
            if theirs[section][key] != value
        }

    def with_model(self, name: str) -> "RunConfig":
        """A copy with another model and the data it needs (see `matching_data`)."""
        return self.replace(**{"model.name": name, "data.name": matching_data(name, self.data.name)})

    def replace(self, **dotted: Any) -> "RunConfig":
        """A validated copy with dotted fields changed: cfg.replace(**{"loader.batch_size": 32})."""
        data = self.to_dict()
        for key, value in dotted.items():
            node = data
            *parents, leaf = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})  # an unknown part is refused by from_dict
                if not isinstance(node, dict):
                    raise ConfigError(f"unknown config key '{key}': {part!r} is a value, not a section")
            node[leaf] = value
        return RunConfig.from_dict(data)


def require_config(cfg: Any) -> RunConfig:
    """The one guard where a config crosses into the launcher or the run store: a RunConfig is
    valid by construction (frozen, checked when built), so only its type is checked here."""
    if not isinstance(cfg, RunConfig):
        raise ConfigError(
            f"the config must be a RunConfig (RunConfig.from_dict(d) builds one from "
            f"a dict), got {type(cfg).__name__}"
        )
    return cfg


def choices(dotted: str) -> tuple:
    """The values a field with a fixed set allows, from its annotation: the widgets' options and
    the CLI's choices. choices("precision.dtype") -> ("fp32", "bf16", "fp16")."""
    section: type = RunConfig
    *parents, leaf = dotted.split(".")
    for part in parents:
        section = _hints(section)[part]
    hint = _hints(section)[leaf]
    if typing.get_origin(hint) is typing.Union:  # Optional[Literal[...]]
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is not Literal:
        raise ValueError(f"{dotted} has no fixed set of values")
    return typing.get_args(hint)
