"""The body of an exported `train.py`: plain torch, no workbench import.

`script.py` puts the run's settings, the model and data code and a copy of the trainer's own step
(`train_step`, workbench.train.step) in front of this text. This part keeps the trainer's order of
random draws (seed, model init, DDP or FSDP, optimizer, sampler) so the exported script reproduces the
workbench run's losses step for step.
"""

MAIN = r'''

# ---- training: the same order of operations as the workbench's trainer --------------------------
class Progress(Hook):
    """What this script shows of its steps: a line every --log-every steps and the last (rank 0),
    each step's loss and time in --metrics, and the step times its closing line reports."""

    def __init__(self, rank, log_every, metrics):
        self.rank, self.log_every, self.metrics = rank, log_every, metrics
        self.times = []

    def after(self, r):
        self.times.append(r.seconds)
        if self.metrics:
            self.metrics.write(json.dumps({"step": r.step, "loss": r.loss, "step_time_ms": r.seconds * 1e3,
                                           "samples_per_s": r.samples / r.seconds}) + "\n")
        if self.rank == 0 and (r.step % self.log_every == 0 or r.last):
            print(f"step {r.step:5d}  loss {r.loss:.4f}  {r.samples / r.seconds:9.1f} samples/s/rank",
                  flush=True)


def train(cfg, args):
    rank, local_rank = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    t_launch = time.time()
    chosen = CHOSEN or choose_threads(settings(CONFIG), other_cores_now() or 0.0)
    torch.set_num_threads(chosen.threads)  # chosen as the workbench chooses a rank's, said once
    if rank == 0:
        print(f"threads: {chosen.why}", flush=True)
        print(f"memory allocator: {ALLOCATOR_IN_USE or allocator_in_use()} (run.allocator "
              f"{cfg.run.allocator!r})", flush=True)
    torch.manual_seed(cfg.run.seed)
    device = pick_device(cfg, local_rank)
    apply_backend_flags(cfg, device)
    if world_size > 1:
        dist.init_process_group(backend_for(cfg, device),
                                timeout=timedelta(seconds=cfg.distributed.timeout_s))

    data = build_data(cfg)
    model = build_model(cfg, data).to(device)
    if cfg.precision.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if cfg.train.checkpoint:
        apply_checkpointing(model, cfg.train.checkpoint)
    if world_size > 1:
        if cfg.distributed.strategy == "fsdp":
            apply_fsdp(model, cfg)
        else:
            model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    step_model = torch.compile(model, mode=cfg.compile.mode) if cfg.compile.enabled else model
    accum = cfg.optim.grad_accum_steps
    parts = StepParts(model, step_model, make_optimizer(cfg, model), grad_scaler(cfg, device),
                      autocast(cfg, device), loss_fn(data.task), device, accum=accum,
                      world_size=world_size, channels_last=cfg.precision.channels_last,
                      grad_clip=cfg.optim.grad_clip)
    loader = make_loader(data.train, cfg, train=True, rank=rank, world_size=world_size,
                         seed=cfg.run.seed)
    batches = cycle_batches(loader)
    metrics = None
    if args.metrics:
        Path(args.metrics).mkdir(parents=True, exist_ok=True)
        metrics = open(Path(args.metrics) / f"rank{rank}.jsonl", "w", buffering=1)

    # run.save_every: every rank writes its part of the state every N steps, in the workbench's
    # format; every rank goes on from it when asked (--resume, also with a workbench run's folder as
    # --state, saved under any strategy) or when restarted (torchrun's --max-restarts, a requeued
    # SLURM job)
    resume_dir = Path(args.state) / RESUME
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or os.environ.get("SLURM_RESTART_COUNT")
                    or 0)
    resumed = load_state(parts, resume_dir) if args.resume or restarted else 0
    refuse_nothing_to_train(resumed, cfg.run.steps)
    for _ in range(resumed * accum):  # the same data order as a run never interrupted
        next(batches)
    if resumed and rank == 0:
        print(f"resumed after step {resumed} from {saved_steps(resume_dir)[resumed]}", flush=True)
    budget = TimeBudget(cfg.run.time_budget_s, world_size, device)  # run.time_budget_s, if set
    # on a busy machine the warm-up tries the thread counts the choice named and keeps the faster
    trial = (TrialSteps.from_env(warmup_steps(cfg.run.steps - resumed), resumed + 1) if world_size == 1
             else None)
    progress = Progress(rank, args.log_every, metrics)
    run_loop(parts, batches, resumed + 1, cfg.run.steps, [h for h in (trial, progress) if h],
             step_fn=train_step, spent=lambda step: budget.spent(), save_every=cfg.run.save_every,
             save=lambda step: save_state(parts, step, resume_dir))  # every rank, its part
    if trial is not None and rank == 0:
        print(f"threads: {trial.record()['why']}", flush=True)
    step_times = progress.times
    times = sorted(step_times[warmup_steps(len(step_times)):] or step_times)
    median = times[len(times) // 2]
    if rank == 0:
        global_batch = cfg.loader.batch_size * accum * world_size
        print(f"done: {len(step_times)} steps in {time.time() - t_launch:.1f} s, median step "
              f"{median * 1e3:.2f} ms, {global_batch / median:.1f} samples/s on {world_size} rank(s)")
    if cfg.run.eval_batches:
        test_loader = make_loader(data.test, cfg, train=False)
        result = evaluate(unwrap(model), test_loader, cfg, device, data.task, cfg.run.eval_batches)
        if rank == 0 and result:
            print(f"eval: loss {result['eval_loss']:.4f}  accuracy {result['eval_accuracy']:.4f}")
    if args.out:
        state = full_state(unwrap(model), cfg)  # every rank: under FSDP they gather the shards
        if rank == 0:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            torch.save(state, Path(args.out) / "model.pt")
    if metrics:
        metrics.close()
    if world_size > 1 and dist.is_initialized():
        # every rank has read its last all-reduce before any closes its connections: a rank that
        # left first could reset a connection with data still in flight to a slower one
        dist.barrier()
        leave_group(model)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, help="override run.steps")
    parser.add_argument("--budget-s", type=float, help="override run.time_budget_s (0: none)")
    parser.add_argument("--seed", type=int, help="override run.seed")
    parser.add_argument("--log-every", type=int, default=10, help="print every N steps (rank 0)")
    parser.add_argument("--metrics", help="folder for per-step losses, one rank{R}.jsonl per rank")
    parser.add_argument("--out", default=str(HERE / "out"), help="folder for model.pt ('' skips it)")
    parser.add_argument("--save-every", type=int, help="override run.save_every (0: never)")
    parser.add_argument("--state", default=str(HERE / "state"),
                        help=f"folder whose {RESUME}/ holds the resumable state, written every "
                             "--save-every steps")
    parser.add_argument("--resume", action="store_true",
                        help="go on from the state in --state (a workbench run folder also works); "
                             "a restarted torchrun or requeued SLURM job does so by itself")
    args = parser.parse_args(argv)
    cfg = settings(CONFIG)
    if args.save_every is not None:
        cfg.run.save_every = args.save_every
    if args.resume and not saved_steps(Path(args.state) / RESUME):
        parser.error(f"--resume: there is no saved state in {Path(args.state) / RESUME} to go on from")
    if args.steps is not None:
        cfg.run.steps = args.steps
    if args.budget_s is not None:
        cfg.run.time_budget_s = args.budget_s
    if args.seed is not None:
        cfg.run.seed = args.seed
    try:
        train(cfg, args)
    except ConfigError as e:  # a damaged or foreign saved state: one line, as the workbench says it
        print(f"train.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    leave(main())
'''
