"""The breakdown as text: what `workbench profile` prints and the notebook shows under its charts."""

from __future__ import annotations

from ..events import RANK, STEP_NUMBER
from ..train.profiling import PHASES
from ..measure import claims
from ..train.sharding import MEMORY_PARTS, PEAK, PEAK_TOLERANCE
from .memory_breakdown import mib

LABELS = {
    "data": "data loading",
    "copy": "host-to-device copy",
    "forward": "forward (and loss)",
    "backward": "backward",
    "all_reduce": "gradient all-reduce (waiting)",
    "optimizer": "optimizer step",
    "rest": "the rest",
}


def _model(cfg: dict) -> str:
    m = cfg["model"]
    name = m["name"]
    if name in ("mlp", "cnn", "transformer"):
        return f"{name} (width {m['width']}, depth {m['depth']})"
    return name


def header(b) -> str:
    cfg = b.config
    r0 = b.ranks[0]
    steps = [s[STEP_NUMBER] for s in r0.steps]
    accum = cfg["optim"]["grad_accum_steps"]
    batch = f"batch {cfg['loader']['batch_size']}" + (f" x {accum} micro-batches" if accum > 1 else "")
    return (
        f"profile of {_model(cfg)}, {batch}, {cfg['precision']['dtype']}, {len(b.ranks)} rank(s) "
        f"on {r0.device}, {r0.threads} thread(s) per process; profiled steps {steps[0]}-{steps[-1]} "
        "(after warm-up)"
    )


def phase_lines(b) -> list[str]:
    phases = b.phases_ms
    total = sum(phases.values()) or 1.0
    lines = []
    for p in PHASES:
        if p == "all_reduce" and len(b.ranks) == 1:
            continue
        lines.append(f"  {LABELS[p]:<32} {phases[p]:10.3f} ms  {phases[p] / total:6.1%}")
    lines.append(
        f"  {'phases (medians) add up to':<32} {sum(phases.values()):10.3f} ms; each profiled "
        f"step's phases are within {b.sum_error():.1%} of its measured time"
    )
    if len(b.ranks) > 1:
        for r in b.ranks:
            parts = ", ".join(f"{p} {v:.1f}" for p, v in r.phases_ms.items() if v >= 0.05)
            lines.append(f"  rank {r.rank}: step {r.step_ms:.2f} ms ({parts})")
    return lines


def step_line(b) -> str:
    line = f"step {b.step_ms:.3f} ms (median of the profiled steps, the trainer's clock)"
    plain = b.unprofiled_step_ms
    if plain:
        line += (
            f"; the run's unprofiled steps: median {plain:.3f} ms, so profiling made a step "
            f"{b.step_ms / plain:.2f}x as long"
        )
    return line


def memory_lines(b, tables: bool = True) -> list[str]:
    """The memory in lines; without `tables`, what a page shows as tables of its own (the parts
    measured against the estimate, the activations by module) is left out, not said twice."""
    m = b.memory
    lines = []
    if tables:
        lines.append(f"  {'':<18} {'measured':>14} {'estimate':>14}")
        for row in m.rows:
            lines.append(
                f"  {row['part']:<18} {mib(row['measured_bytes']):>14} {mib(row['estimate_bytes']):>14}"
            )
        if m.context_bytes:
            lines.append(f"  (the estimate also allows {mib(m.context_bytes)} for a CUDA context on a GPU)")
        top = list(m.per_module.items())[:6]
        if top:
            lines.append("  activations by module: " + ", ".join(f"{k} {mib(v)}" for k, v in top))
    acc = m.accumulation_sentence()
    if acc:
        lines.append("  " + acc)
    d = m.device
    if "peak_allocated_bytes" in d:
        lines.append(
            f"  GPU allocator: peak {mib(d['peak_allocated_bytes'])} allocated, now "
            f"{mib(d['allocated_bytes'])} allocated of {mib(d['reserved_bytes'])} reserved; "
            f"NVML: {mib(d.get('nvml_used_bytes'))} used on the device "
            f"{d.get('nvml_note', '(all processes)')}"
        )
    elif "rss_bytes" in d:
        lines.append(
            f"  process memory when the profiled steps ended: {mib(d['rss_bytes'])} resident, the "
            f"highest so far {mib(d['peak_rss_bytes'])} (everything the process holds: torch, "
            "Python, data)"
        )
        if m.peak_sentence():
            lines.append(f"  {m.peak_sentence()}")
    lines += [f"  note: {n}" for n in m.notes]
    return lines + per_rank_lines(b.summary.get("memory_per_rank"))


def per_rank_lines(per_rank: dict | None) -> list[str]:
    """Each rank's parameter, gradient, optimizer and saved-activation bytes and its peak,
    predicted against measured (several ranks: DDP replicas or FSDP shards)."""
    if not per_rank:
        return []
    parts = (*MEMORY_PARTS, PEAK)
    label = f"per rank ({per_rank['strategy'].upper()}):"
    lines = [
        f"  {label:<16}" + "".join(f"{p:>26}" for p in parts),
        f"  {'':<16}" + f"{'predicted':>13}{'measured':>13}" * len(parts),
    ]
    for want, got in zip(per_rank["predicted"], per_rank["measured"]):
        measured = [mib(got.get(p)) for p in parts]  # older runs lack some
        lines.append(
            f"  rank {got[RANK]:<11}"
            + "".join(f"{mib(want.get(p)):>13}{m:>13}" for p, m in zip(parts, measured))
        )
        if want.get(PEAK) and got.get(PEAK):  # a predicted peak shown is a claim
            claims.prediction(
                "the per-rank memory",
                f"rank {got[RANK]} peak",
                want[PEAK] / 2**20,
                got[PEAK] / 2**20,
                PEAK_TOLERANCE,
                unit=" MiB",
            )
    lines.append(
        "  peak: each rank's highest memory when its steps ended, before evaluation and the "
        "profiler's trace (the resident set on a CPU)"
    )
    lines.append(
        f"  not measured per rank: {', '.join(per_rank['not_measured']) or 'nothing'}; "
        f"not predicted: {', '.join(per_rank['not_predicted']) or 'nothing'}"
    )
    return lines


def op_lines(b, top: int) -> list[str]:
    ops = b.ranks[0].top_ops[:top]
    if not ops:
        return []
    device = "device_ms_per_step" in ops[0]
    lines = [f"  {'operator':<44} {'phase':<10} {'self ms':>9} {'calls':>6}  input shapes"]
    for o in ops:
        t = o["device_ms_per_step"] if device else o["self_ms_per_step"]
        lines.append(
            f"  {o['name'][:44]:<44} {o['phase'][:10]:<10} {t:9.3f} {o['calls_per_step']:6g}  "
            f"{o['input_shapes'][:60]}"
        )
    return lines


def breakdown_text(b, top: int = 10, tables: bool = True) -> str:
    """The whole breakdown as text (a terminal's); `tables=False` leaves out what a notebook shows
    as tables beside it (the memory parts, the activations by module, the top operators)."""
    clock = "device" if b.ranks[0].device.startswith("cuda") else "self"
    ops = [f"top operators per step (rank 0, by {clock} time):", *op_lines(b, top)] if tables else []
    lines = [
        header(b),
        step_line(b),
        *phase_lines(b),
        b.verdict.text(),
        "memory:",
        *memory_lines(b, tables),
        *ops,
        f"trace: {b.ranks[0].trace} (open it in https://ui.perfetto.dev)",
    ]
    lines += [f"note: {n}" for n in b.notes]
    return "\n".join(lines)
