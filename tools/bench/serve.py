"""The serving lab measured: the load generator's ceiling and honesty, the server's own cost
against a plain FastAPI endpoint, dynamic batching on a model whose batch-1 forward takes 10 ms or
more here, two worker processes against one, ONNX Runtime against eager torch, and an A/A beside
two busy processes. Every comparison goes through the trial engine
(slices of load alternating A B B A, the median ratio with its 95 % interval).

    python -m tools.bench serve [--rounds 8] [--slice-s 2]

Goals (the serving issue): the server's p50 at concurrency 1 within 0.5 ms of the plain endpoint;
batching at concurrency 32 at least 3x the throughput without it; at least 2x the plain endpoint's
throughput at no worse a p99; the A/A inside [0.90, 1.10]; the load's p50 against a fixed service
time within 5 % of it plus the generator's own overhead. A throughput within 80 % of the
generator's ceiling is marked as limited by the generator.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import urllib.request

import torch

from workbench.compress.subject import Subject
from workbench.config import RunConfig
from workbench.procs import OtherWork
from workbench.serving.side_by_side import SLICE_S, compare_servers
from workbench.serving.load_generator import Level, drive
from workbench.serving.process import ServerProcess, servers_running

from .results import recorded

TARGETS = ("-m", "tools.bench.serve_targets")
BATCH_1_MS = 10.0  # the batching model's batch-1 forward takes at least this here
LIMITED = 0.8  # of the generator's ceiling: a throughput this close says more about the client


def forward_ms(width: int, depth: int, batch: int = 1) -> float:
    """Median ms of one forward of the MLP at `width` x `depth`, measured here."""
    cfg = RunConfig.smoke().replace(**{"model.width": width, "model.depth": depth})
    subject = Subject.from_config(cfg)
    x = subject.example(batch)
    times = []
    with torch.inference_mode():
        for i in range(12):
            t = time.perf_counter()
            subject.model(x)
            if i >= 2:
                times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2] * 1e3


def wide_enough(depth: int = 6) -> tuple[int, float]:
    """The narrowest MLP width (doubling from 1024) whose batch-1 forward takes BATCH_1_MS here."""
    width = 1024
    while (ms := forward_ms(width, depth)) < BATCH_1_MS and width < 16384:
        width *= 2
    return width, ms


def level_once(url: str, concurrency: int, seconds: float = 3.0) -> dict:
    return asyncio.run(drive(url, [Level("concurrency", concurrency)], seconds, 0.5))["levels"][0]


def fmt_ms(r: dict, q: str) -> str:
    lo, hi = r[f"{q}_ms_interval"]
    inside = f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else ""
    return f"{r[f'{q}_ms']:.2f}{inside} ms"


def limited(rps: float, ceiling: float) -> str:
    return " (limited by the load generator)" if rps >= LIMITED * ceiling else ""


def goal(met: bool) -> str:
    return "goal met" if met else "GOAL NOT MET"


def two_servers(a: tuple[str, list], b: tuple[str, list], concurrency: int, rounds: int, slice_s: float):
    """Two `workbench serve` servers (label, flags) started together and compared side by side:
    each one's report, B's with its throughput ratio over A's."""
    with servers_running(dict((a, b))) as servers:
        report = compare_servers({k: s.url for k, s in servers.items()}, a[0], concurrency, rounds, slice_s)
    return report["variants"][a[0]], report["variants"][b[0]]


@recorded("serve", "Serving: the server, dynamic batching and the load generator")
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench serve", description=__doc__)
    p.add_argument("--rounds", type=int, default=8, help="pairs of load slices a comparison")
    p.add_argument("--slice-s", type=float, default=SLICE_S, help="seconds of load a slice")
    args = p.parse_args(argv)
    rounds, slice_s = args.rounds, args.slice_s
    print(f"Comparisons: {rounds} pairs of {slice_s:g} s slices of closed-loop load, alternating A B B A.")

    with ServerProcess(["noop"], command=TARGETS) as noop:
        ceilings = {c: level_once(noop.url, c) for c in (1, 32)}
    ceiling = max(r["throughput_rps"] for r in ceilings.values())
    overhead = ceilings[1]["p50_ms"]
    print(
        "\nThe load generator's ceiling (an endpoint that does nothing): "
        + ", ".join(f"{r['throughput_rps']:.0f} requests/s at concurrency {c}" for c, r in ceilings.items())
        + f"; its own round trip at concurrency 1: p50 {fmt_ms(ceilings[1], 'p50')}"
    )

    service_ms = 20.0
    with ServerProcess(["sleep", "--ms", f"{service_ms:g}"], command=TARGETS) as sleeper:
        honest = level_once(sleeper.url, 1)
        with urllib.request.urlopen(f"{sleeper.url}/served", timeout=30) as r:
            served = json.loads(r.read())["median_ms"]  # the server's own clock: a sleep oversleeps
    expected = served + overhead
    off = abs(honest["p50_ms"] - expected) / expected
    print(
        f"\nHonesty: against a service time of {service_ms:g} ms asked ({served:.2f} ms as the server "
        f"timed it, median), p50 {fmt_ms(honest, 'p50')}; expected {expected:.2f} ms (that plus the "
        f"generator's round trip): {off:.1%} off ({goal(off <= 0.05)}: within 5 %)"
    )

    small = ["--set", "model.width=256", "--set", "model.depth=2"]
    with (
        ServerProcess(small, command=TARGETS[:1] + ("tools.bench.serve_targets", "model")) as plain,
        ServerProcess(small) as ours,
    ):
        own = compare_servers({"plain": plain.url, "workbench": ours.url}, "plain", 1, rounds, slice_s)
    a, b = own["variants"]["plain"], own["variants"]["workbench"]
    print(
        f"\nThe server's own cost (MLP 256x2, {forward_ms(256, 2):.3f} ms a forward, concurrency 1, "
        f"batching off): plain FastAPI endpoint p50 {fmt_ms(a, 'p50')}, {a['throughput_rps']:.0f}/s"
        f"{limited(a['throughput_rps'], ceiling)}; workbench p50 {fmt_ms(b, 'p50')}, "
        f"{b['throughput_rps']:.0f}/s{limited(b['throughput_rps'], ceiling)}; throughput {b['text']}; "
        f"p50 {b['p50_ms'] - a['p50_ms']:+.2f} ms ({goal(b['p50_ms'] - a['p50_ms'] <= 0.5)}: within 0.5 ms)"
    )

    width, ms = wide_enough()
    wide = ["--set", f"model.width={width}", "--set", "model.depth=6"]
    batched = [*wide, "--max-batch", "32", "--max-wait-ms", "5"]
    with (
        ServerProcess(wide, command=TARGETS[:1] + ("tools.bench.serve_targets", "model")) as plain,
        servers_running({"no batching": wide, "batching 32": batched}) as servers,
    ):
        unbatched, ours = servers.values()
        batching = compare_servers(
            {"plain": plain.url, "no batching": unbatched.url, "batching 32": ours.url},
            "no batching",
            32,
            rounds,
            slice_s,
        )
        against_plain = compare_servers(
            {"plain": plain.url, "batching 32": ours.url}, "plain", 32, rounds, slice_s
        )
    v = batching["variants"]
    none, on = v["no batching"], v["batching 32"]
    ratio = on.get("throughput") or 0
    print(
        f"\nBatching (MLP {width}x6, {ms:.1f} ms a batch-1 forward here, concurrency 32): without, "
        f"{none['throughput_rps']:.0f}/s, p99 {fmt_ms(none, 'p99')}; with up to 32 samples waiting at "
        f"most 5 ms, {on['throughput_rps']:.0f}/s{limited(on['throughput_rps'], ceiling)}, p99 "
        f"{fmt_ms(on, 'p99')}; throughput {on['text']} "
        f"({goal(ratio >= 3 and on['throughput_verdict'] == 'faster')}: 3x)"
    )
    pv = against_plain["variants"]
    plain_r, ours_r = pv["plain"], pv["batching 32"]
    ratio = ours_r.get("throughput") or 0
    no_worse = ours_r["p99_ms"] <= plain_r["p99_ms"]
    print(
        "Against the plain FastAPI endpoint on that model (concurrency 32): plain "
        f"{plain_r['throughput_rps']:.0f}/s, "
        f"p99 {fmt_ms(plain_r, 'p99')}; workbench batching {ours_r['throughput_rps']:.0f}/s, p99 "
        f"{fmt_ms(ours_r, 'p99')}; throughput {ours_r['text']} "
        f"({goal(ratio >= 2 and no_worse)}: 2x at no worse a p99)"
    )

    one_r, two_r = two_servers(
        ("1 worker", small), ("2 workers", [*small, "--workers", "2"]), 8, rounds, slice_s
    )
    print(
        f"\nWorkers (MLP 256x2, concurrency 8, batching off): 1 process of 2 threads "
        f"{one_r['throughput_rps']:.0f}/s, p99 {fmt_ms(one_r, 'p99')}; 2 processes of 1 thread "
        f"{two_r['throughput_rps']:.0f}/s{limited(two_r['throughput_rps'], ceiling)}, p99 "
        f"{fmt_ms(two_r, 'p99')}; throughput {two_r['text']}"
    )
    eager_r, onnx_r = two_servers(("eager", wide), ("onnx", [*wide, "--variant", "onnx"]), 1, rounds, slice_s)
    print(
        f"ONNX Runtime against eager torch (MLP {width}x6, concurrency 1, batching off): eager p50 "
        f"{fmt_ms(eager_r, 'p50')}, {eager_r['throughput_rps']:.0f}/s; onnx p50 {fmt_ms(onnx_r, 'p50')}, "
        f"{onnx_r['throughput_rps']:.0f}/s; throughput {onnx_r['text']}"
    )

    two_r, ray_r = two_servers(
        ("2 workers", [*small, "--workers", "2"]),
        ("2 replicas", [*small, "--replicas", "2"]),
        8,
        rounds,
        slice_s,
    )
    print(
        f"Ray Serve against the workbench's own workers (MLP 256x2, concurrency 8, batching off, 2 "
        f"processes of 1 thread each): workers {two_r['throughput_rps']:.0f}/s, p99 {fmt_ms(two_r, 'p99')}; "
        f"Ray Serve replicas {ray_r['throughput_rps']:.0f}/s, p99 {fmt_ms(ray_r, 'p99')}; "
        f"throughput {ray_r['text']}"
    )

    # a busy machine's pairs spread wider: more of them for a narrow interval (24 pairs read
    # [0.88, 1.03] once and [0.92, 1.08] once; the interval narrows with the root of the pairs)
    aa_rounds = 4 * rounds
    with servers_running({"A": small, "A again": small}) as servers, OtherWork(2):
        aa = compare_servers({k: s.url for k, s in servers.items()}, "A", 8, aa_rounds, slice_s)
    again = aa["variants"]["A again"]
    inside = (
        again["throughput_low"] is not None
        and 0.9 <= again["throughput_low"] <= again["throughput_high"] <= 1.1
    )
    print(
        f"\nA/A beside two busy processes (MLP 256x2, concurrency 8, {aa_rounds} pairs): {again['text']} "
        f"({goal(inside and again['throughput_verdict'] == 'within noise')}: inside [0.90, 1.10])"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
