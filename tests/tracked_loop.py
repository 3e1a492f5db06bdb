"""A user's own loop under workbench.track, for the tracking tests: a small MLP on random data.

python tests/tracked_loop.py --steps 20 [--fail-at N] [--forever] [--log-step] [--dist]
"""

import argparse
import faulthandler
import os
import signal

import torch

import workbench

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--fail-at", type=int, default=0)
p.add_argument("--fail-rank", type=int, default=-1)
p.add_argument("--forever", action="store_true", help="until stopped, killed or out of budget")
p.add_argument("--log-step", action="store_true", help="run.log_step instead of `with run.step`")
p.add_argument("--label", default=None)
p.add_argument("--tensorboard", help="a live TensorBoard sink into this folder")
p.add_argument("--mlflow", help="a live MLflow sink into this store")
args = p.parse_args()
faulthandler.register(signal.SIGUSR1)  # a test that waited too long asks where every thread is
sinks = []
if args.tensorboard or args.mlflow:
    from workbench.sinks import MlflowSink, TensorBoardSink

    sinks = ([TensorBoardSink(args.tensorboard)] if args.tensorboard else []) + (
        [MlflowSink(args.mlflow)] if args.mlflow else []
    )

distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
if distributed:
    import torch.distributed as dist

    dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
if distributed:
    model = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
run = workbench.track(
    config=vars(args), label=args.label, steps=None if args.forever else args.steps, sinks=sinks
)
step = 0
while args.forever or step < args.steps:
    step += 1
    x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
    if args.log_step:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        run.log_step(loss=loss, samples=len(x))
    else:
        with run.step(samples=len(x)) as s:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            s.loss = loss
    if step == args.fail_at and args.fail_rank in (-1, int(os.environ.get("RANK", 0))):
        raise ValueError(f"the loop failed at step {step}")
if distributed:
    dist.destroy_process_group()
