"""A plain PyTorch training loop, as people write them, with the three lines that put it in the
workbench (marked `# workbench`): the live dashboard, `workbench runs`, `compare`, the diagnosis
of a crash, and `workbench ab --cmd` with an interval.

    python examples/own_loop.py                       # a run under runs/
    torchrun --nproc-per-node 2 examples/own_loop.py  # DDP: every rank in one run folder
    workbench ab --cmd "python examples/own_loop.py" --vs-cmd "python examples/own_loop.py --bf16"

The 1,797 8x8 handwritten digits that ship with scikit-learn, an MLP, AdamW. `run.log_step` times
each step from the end of the one before; `with run.step(samples=n) as step: ...` around the step
instead also tells the step from the wait for its batch.
"""

import argparse
import contextlib
import os

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import workbench  # workbench

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=20)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=1e-3)
parser.add_argument("--width", type=int, default=256)
parser.add_argument("--bf16", action="store_true", help="autocast the forward pass to bfloat16")
args = parser.parse_args()

distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
if distributed:
    dist.init_process_group("gloo")
torch.manual_seed(0)
digits = load_digits()
data = TensorDataset(torch.tensor(digits.data, dtype=torch.float32) / 16, torch.tensor(digits.target))
sampler = DistributedSampler(data) if distributed else None
loader = DataLoader(data, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler)
model = torch.nn.Sequential(
    torch.nn.Linear(64, args.width),
    torch.nn.ReLU(),
    torch.nn.Linear(args.width, args.width),
    torch.nn.ReLU(),
    torch.nn.Linear(args.width, 10),
)
if distributed:
    model = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.bf16 else contextlib.nullcontext

run = workbench.track(config=vars(args), precision="bf16" if args.bf16 else "fp32")  # workbench
for epoch in range(args.epochs):
    if sampler is not None:
        sampler.set_epoch(epoch)
    for x, y in loader:
        with autocast():
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        run.log_step(loss=loss, samples=len(x))  # workbench
if distributed:
    dist.destroy_process_group()
