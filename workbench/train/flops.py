"""What one training step costs: FLOPs (counted by torch's FlopCounterMode over a real forward and
backward), dispatched ops, parameters, saved activations, and the bytes it must move at least.

Counting runs the real model once on a real batch and leaves no trace: the RNG state, buffers
(BatchNorm running statistics) and gradients are restored, so training afterwards is unchanged.
FlopCounterMode counts matrix work (matmul, convolution, attention), the convention behind MFU;
element-wise ops add bytes, not FLOPs.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from .data import build_data, sample_batch
from .models import build_model, loss_fn
from .precision import autocast
from .saved_tensors import saved_for_backward

# Optimizer traffic per parameter in bytes (fp32): reads of param, grad and state, writes back.
OPTIMIZER_BYTES = {"adamw": 28, "sgd": 20}
OPTIMIZER_STATE_BYTES = {"adamw": 8, "sgd": 4}
GIB = 2**30


@dataclass
class StepCost:
    flops: int  # forward + backward matrix FLOPs of one optimizer step (all micro-batches)
    ops: int  # aten ops dispatched by forward + backward (a proxy for kernel launches)
    params: int
    param_bytes: int
    activation_bytes: int  # saved for backward, one micro-batch
    batch_size: int
    optimizer: str = "adamw"
    accum: int = 1

    @property
    def bytes_moved(self) -> int:
        """A lower bound on memory traffic: weights read in forward and backward, gradients
        written, the optimizer's reads and writes, activations written then read back."""
        per_param = 8 + 4 + OPTIMIZER_BYTES.get(self.optimizer, 28)
        return self.params * per_param + 2 * self.activation_bytes * self.accum

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved: where this step sits on a roofline."""
        return self.flops / self.bytes_moved if self.bytes_moved else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(bytes_moved=self.bytes_moved, intensity=round(self.intensity, 3))
        return d


def memory_need_gib(cost: StepCost, batch_scale: float = 1.0, context_gib: float = 0.0) -> dict:
    """GiB a training step holds: fp32 weights and gradients (autocast keeps fp32 master weights),
    optimizer state and saved activations (they grow with the batch), plus a fixed allowance
    (the CUDA context on a GPU). The GPU chooser and the pre-launch check both ask this."""
    weights = cost.params * 4 / GIB
    grads = cost.params * 4 / GIB
    state = cost.params * OPTIMIZER_STATE_BYTES.get(cost.optimizer, 8) / GIB
    acts = cost.activation_bytes * batch_scale / GIB
    total = weights + grads + state + acts + context_gib
    return {
        "weights_gib": weights,
        "grads_gib": grads,
        "optimizer_gib": state,
        "activations_gib": acts,
        "total_gib": total,
    }


class _OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def no_trace(model: torch.nn.Module):
    """Run something on `model` and undo its side effects: RNG streams, buffers, gradients."""
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    buffers = {k: v.detach().clone() for k, v in model.named_buffers()}
    grads = {n: p.grad for n, p in model.named_parameters()}
    try:
        yield
    finally:
        with torch.no_grad():
            for k, v in model.named_buffers():
                if k in buffers:
                    v.copy_(buffers[k])
        for n, p in model.named_parameters():
            p.grad = grads.get(n)
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)


def count_step(model, x, y, lossf, amp=None) -> tuple[int, int, int]:
    """(FLOPs, dispatched ops, saved-activation bytes) of one forward + backward on (x, y)."""
    with no_trace(model):
        flop_mode = FlopCounterMode(display=False)
        ops = _OpCounter()
        with flop_mode, ops:
            with saved_for_backward(model) as saved:
                with amp or nullcontext():
                    loss = lossf(model(x), y)
            loss.backward()
    return int(flop_mode.get_total_flops()), ops.count, sum(b for b, _ in saved.values())


def first_batch(dataset, batch_size: int, device):
    """The first `batch_size` samples straight from the dataset, collated as the loader collates
    them (numpy arrays and numbers become tensors): no loader, no sampler RNG."""
    x, y = sample_batch(dataset, batch_size)
    return x.to(device), y.to(device)


def step_cost(cfg, model, data, device) -> StepCost:
    """Count the cost of one optimizer step of `cfg` on the real model and a real batch."""
    x, y = first_batch(data.train, cfg.loader.batch_size, device)
    if cfg.precision.channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    flops, ops, act = count_step(model, x, y, loss_fn(data.task), autocast(cfg, device))
    accum = cfg.optim.grad_accum_steps
    params = sum(p.numel() for p in model.parameters())
    pbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return StepCost(flops * accum, ops * accum, params, pbytes, act, len(x), cfg.optim.name, accum)


def cost_of_config(cfg, device="cpu") -> StepCost:
    """Build the config's data and model here and count one step (the chooser and roofline use it)."""
    torch.manual_seed(cfg.run.seed)
    data = build_data(cfg)
    model = build_model(cfg, data).to(device)
    return step_cost(cfg, model, data, torch.device(device))
