"""`workbench load`: drive a server and say what its users would wait.

    workbench load http://127.0.0.1:8700 --concurrency 1,4,16,64
    workbench load http://127.0.0.1:8700 --rate 50,200,800 --duration-s 10 --json

Per level: requests sent, answered, refused and failed (every one accounted for), throughput, and
p50, p90 and p99 latency with their 95 % intervals. Exits 1 when any request got no answer.
The load is a run: its folder (under runs/, or --run-dir) holds each measured second as a step and
the levels' report (load.json), so `workbench runs`, `compare` and the charts read it.
"""

from __future__ import annotations

import argparse
import json

from ..config import ConfigError
from .prune import parse_list


def add_parser(sub):
    p = sub.add_parser(
        "load",
        help="drive a server: latency percentiles and throughput per concurrency or arrival rate",
        description="Closed-loop (--concurrency) or open-loop Poisson (--rate) load against a "
        "workbench server; latency counts from each request's scheduled send time.",
    )
    p.add_argument("url", help="the server, e.g. http://127.0.0.1:8700")
    p.add_argument("--concurrency", help="closed loop: clients at once, comma-separated (e.g. 1,4,16)")
    p.add_argument("--rate", help="open loop: requests per second, comma-separated (e.g. 50,200)")
    p.add_argument("--duration-s", type=float, default=5.0, help="measured seconds per level")
    p.add_argument("--warmup-s", type=float, default=1.0, help="seconds per level left out first")
    p.add_argument(
        "--requests", type=int, default=None, help="send at most this many per level, warm-up included"
    )
    p.add_argument(
        "--vs",
        help="a second server: compare its throughput against the first's, slices of load alternating "
        "A B B A, with an interval (one --concurrency level)",
    )
    p.add_argument(
        "--rounds", type=int, default=8, help="with --vs: pairs of slices (6 or more give an interval)"
    )
    p.add_argument("--run-dir", help="the load run's folder (new or empty; default: a fresh one under runs/)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def levels_from(args):
    from ..serving.bounds import MAX_CONCURRENCY, MAX_REQUESTS
    from ..serving.load_generator import Level

    levels = []
    for flag, kind, cast, top in (
        ("concurrency", "concurrency", int, MAX_CONCURRENCY),
        ("rate", "rate", float, MAX_REQUESTS),
    ):
        text = getattr(args, flag)
        for v in parse_list(text, cast, f"--{flag}") if text else []:
            if not 0 < v <= top:
                raise ConfigError(f"--{flag} values must be in (0, {top}], got {v:g}")
            levels.append(Level(kind, v))
    if not levels:
        levels = [Level("concurrency", 1)]
    if not 0 < args.duration_s <= 600:
        raise ConfigError(f"--duration-s must be in (0, 600], got {args.duration_s:g}")
    if args.requests is not None and not 0 < args.requests <= MAX_REQUESTS:
        raise ConfigError(f"--requests must be 1-{MAX_REQUESTS}, got {args.requests}")
    if not 0 <= args.warmup_s <= 60:
        raise ConfigError(f"--warmup-s must be in [0, 60], got {args.warmup_s:g}")
    return levels


def started(health: dict, levels, args) -> str:
    return (
        f"{health['model']} ({health['variant']}, batching {health['batching']}): {len(levels)} "
        f"level(s), {args.duration_s:g} s measured each after {args.warmup_s:g} s left out; latency "
        "from each request's scheduled send time, intervals 95 %"
    )


def compare(args, levels) -> int:
    from ..serving.side_by_side import SLICE_S, compare_servers

    if len(levels) != 1 or levels[0].kind != "concurrency":
        raise ConfigError("--vs compares at one --concurrency level, e.g. --concurrency 16")
    if not 1 <= args.rounds <= 100:
        raise ConfigError(f"--rounds must be 1-100, got {args.rounds}")
    for url in (args.url, args.vs):
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"url must start with http:// or https://, got {url!r}")
    concurrency = int(levels[0].value)
    if not args.json:
        print(
            f"{args.vs} against {args.url} at concurrency {concurrency}: {args.rounds} pairs of "
            f"{SLICE_S:g} s slices, alternating A B B A",
            flush=True,
        )
    report = compare_servers({"A": args.url, "B": args.vs}, "A", concurrency, args.rounds)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    from ..serving.latency import with_interval

    for label, r in report["variants"].items():
        print(
            f"{label} {r['url']}: {r['throughput_rps']:.1f}/s, p50 "
            f"{with_interval(r['p50_ms'], r['p50_ms_interval'])} ms, p99 "
            f"{with_interval(r['p99_ms'], r['p99_ms_interval'])} ms"
        )
    print(f"B's throughput over A's: {report['variants']['B']['text']}")
    return 0


def main(args: argparse.Namespace) -> int:
    from ..serving.bounds import MAX_REQUESTS
    from ..serving.latency import level_line
    from ..serving.load_generator import drive, run_coroutine

    levels = levels_from(args)
    if args.vs:
        return compare(args, levels)
    if not args.url.startswith(("http://", "https://")):
        raise ConfigError(f"url must start with http:// or https://, got {args.url!r}")
    box: dict = {}

    def on_start(health: dict) -> None:
        from ..serving.load_run import LoadRun

        settings = {
            "url": args.url,
            "levels": [level.name for level in levels],
            "duration_s": args.duration_s,
            "warmup_s": args.warmup_s,
            "requests": args.requests,
        }
        box["run"] = LoadRun.open(health, settings, args.run_dir)
        if not args.json:
            print(started(health, levels, args), flush=True)

    try:
        report = run_coroutine(
            drive(
                args.url,
                levels,
                args.duration_s,
                args.warmup_s,
                args.requests or MAX_REQUESTS,
                on_level=None if args.json else lambda r: print(level_line(r), flush=True),
                on_start=on_start,
                on_window=lambda r: box["run"].window(r),
            )
        )
    except BaseException as e:
        if "run" in box:
            box["run"].end(e)
        raise
    failed = sum(r["failed"] for r in report["levels"])
    causes = sorted({c for r in report["levels"] for c in r.get("causes", [])})
    run = box["run"]
    report["run_dir"] = str(run.dir)
    run.close(report, failed, causes)
    if args.json:
        print(json.dumps(report, indent=2))
        return 1 if failed else 0
    if failed:
        print(f"{failed} request(s) got no answer: {', '.join(causes)}")
    print(f"run folder: {run.dir}")
    return 1 if failed else 0
