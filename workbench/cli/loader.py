"""`workbench loader`: make the on-disk image set, and sweep loader settings over a folder of images.

workbench loader make-images /tmp/digits64 --count 2000 --size 64
workbench loader sweep /tmp/digits64 --workers 0 1 2 --batch-size 32 64 --persistent --train
"""

from __future__ import annotations

import json


def add_parser(sub):
    p = sub.add_parser(
        "loader",
        help="data loading lab: make an image set, sweep loader settings",
        description=__doc__.split("\n")[0],
    )
    what = p.add_subparsers(dest="loader_command", required=True)
    m = what.add_parser("make-images", help="write PNG files ROOT/<class>/<n>.png")
    m.add_argument("root")
    m.add_argument("--count", type=int, default=2000)
    m.add_argument("--size", type=int, default=64, help="side in pixels")
    m.add_argument("--source", default="digits", help="digits | synthetic")
    s = what.add_parser("sweep", help="measure every loader setting on a folder of images")
    s.add_argument("root", help="ROOT/<class>/<image> (e.g. made by make-images)")
    s.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    s.add_argument("--batch-size", type=int, nargs="+", default=[32])
    s.add_argument("--prefetch", type=int, nargs="*", default=[], help="prefetch factors besides the default")
    s.add_argument("--persistent", action="store_true", help="also try persistent workers")
    s.add_argument("--pin", action="store_true", help="also try pin_memory (measured only with a GPU)")
    s.add_argument("--rounds", type=int, default=6, help="alternating rounds (6 give a 95%% interval)")
    s.add_argument("--batches", type=int, default=20, help="batches per epoch measured")
    s.add_argument("--train", action="store_true", help="run a CNN training step per batch (data-wait share)")
    s.add_argument("--nproc", type=int, default=1, help="training processes that will share the cores")
    s.add_argument("--json", action="store_true", help="print the table and advice as JSON")
    return p


def main(args) -> int:
    from ..loading.imageset import generate_image_set
    from ..train.images import ImageFolder

    if args.loader_command == "make-images":
        root = generate_image_set(args.root, count=args.count, size=args.size, source=args.source)
        print(f"{args.count} images of {args.size}x{args.size} under {root}")
        return 0
    from ..config import ConfigError
    from ..events import EVENT, SAMPLES_PER_S
    from ..loading.advice import recommend
    from ..machine.contention import busy_sentence
    from ..loading.loader_sweep import MEASURE, grid, run_sweep, summarize_sweep, train_step

    for flag, value, low in (
        ("--rounds", args.rounds, 1),
        ("--batches", args.batches, 2),
        ("--nproc", args.nproc, 1),
    ):
        if value < low:
            raise ConfigError(f"{flag} must be >= {low}, got {value}")
    data = ImageFolder(args.root)
    settings = grid(
        num_workers=args.workers,
        batch_size=args.batch_size,
        prefetch_factor=[None, *args.prefetch],
        pin_memory=[False, True] if args.pin else [False],
        persistent_workers=[False, True] if args.persistent else [False],
    )
    step = train_step(data.sample_shape, len(data.classes)) if args.train else None
    records = []
    for rec in run_sweep(data, settings, rounds=args.rounds, max_batches=args.batches, step=step):
        records.append(rec)
        if rec[EVENT] == MEASURE and not args.json:
            print(
                f"[{rec['done']}/{rec['total']}] {rec['setting']:<22} {rec[SAMPLES_PER_S]:>9.0f} samples/s",
                flush=True,
            )
    table = summarize_sweep(records)
    advice = recommend(table, nproc=args.nproc)
    if args.json:
        print(json.dumps({"table": table.to_dict("records"), "advice": advice}, indent=2, default=str))
    else:
        print(table.drop(columns=["rates"]).to_string(index=False))
        print("\n" + advice["text"])
        busy = busy_sentence(records[-1].get("contention"))
        if busy:
            print(f"machine busy: {busy}")
    return 0
