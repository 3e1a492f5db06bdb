"""Known-harmless library messages of the compress lab, each filtered by its own pattern around
the one call that triggers it, never globally. What a user should know stays in the record:
the torch.ao deprecation is said once in `quantize`'s notes (`DEPRECATION_NOTE`).

    from workbench.compress import quiet
    with quiet.torchao_import():
        import torchao.quantization
"""

from __future__ import annotations

import contextlib
import logging
import re
import warnings

import torch

# "torchao" logger: CUDA-only kernels (mxfp8, sm90a) can't load without CUDA; our int8 needs none.
TORCHAO_CUDA_LIBS = re.compile(
    r"Failed to load \S*torchao[/\\]_C_(mxfp8|cutlass_90a)"
    r"[^/\\\s]*\.so: "
)
# "torch.utils._pytree" logger: torchao registers its enum the old way, a note to torchao.
PYTREE_ENUM = re.compile(
    r"<enum '\w+'> is an Enum subclass and is now natively supported by "
    r"torch\.compile"
)
# DeprecationWarning of quantize_dynamic and its helpers: said once in the notes instead.
TORCH_AO_DEPRECATED = r"torch\.ao\.quantization is deprecated"
# UserWarning when quantize_dynamic makes qint8 weights: the same deprecation, the same note.
QTENSOR_DEPRECATED = (
    r"torch\.quantize_per_tensor, torch\.quantize_per_channel and other "
    r"quantized tensor creation functions"
)
# UserWarning on making a CSR tensor: SparseLinear needs only to_sparse_csr, sparse.mm, to_dense.
CSR_BETA = r"Sparse CSR tensor support is in beta state"


class DropLog(logging.Filter):
    """Drops the records of one logger whose message matches `pattern` (and `when` holds)."""

    def __init__(self, pattern: re.Pattern, when: bool = True):
        super().__init__()
        self.pattern, self.when = pattern, when

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.when and self.pattern.match(record.getMessage()))


@contextlib.contextmanager
def drop_logs(*rules: tuple[str, logging.Filter]):
    """Each (logger name, filter) in place for the block only."""
    added = [(logging.getLogger(name), f) for name, f in rules]
    for logger, f in added:
        logger.addFilter(f)
    try:
        yield
    finally:
        for logger, f in added:
            logger.removeFilter(f)


@contextlib.contextmanager
def drop_warnings(*rules: tuple[str, type[Warning]]):
    """Each (message regex, category) ignored for the block only (the filters are process-wide,
    so another thread's warning meets them too: only their named messages are dropped)."""
    with warnings.catch_warnings():
        for message, category in rules:
            warnings.filterwarnings("ignore", message=message, category=category)
        yield


def torchao_import():
    """Around `import torchao`: its CUDA-only libraries on a torch without CUDA, its enum note."""
    return drop_logs(
        ("torchao", DropLog(TORCHAO_CUDA_LIBS, when=torch.version.cuda is None)),
        ("torch.utils._pytree", DropLog(PYTREE_ENUM)),
    )


def torch_ao_quantization():
    """Around `torch.ao.quantization.quantize_dynamic`: its deprecation, said in the notes."""
    return drop_warnings((TORCH_AO_DEPRECATED, DeprecationWarning), (QTENSOR_DEPRECATED, UserWarning))


def sparse_csr():
    """Around making a CSR tensor (to_sparse_csr, nn.Parameter of one): torch's beta notice."""
    return drop_warnings((CSR_BETA, UserWarning))
