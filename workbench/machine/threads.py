"""How many intra-op threads each rank runs and how its OpenMP threads wait, chosen from what other
programs use of this machine at launch, and said with the reason.

    choice = choose_threads(cfg, other_cores_now())   # a moment's look at the machine
    choice.env()                   # {'OMP_WAIT_POLICY': 'PASSIVE'} while other programs hold cores
    choice.why                     # 'other processes held 1.9 of 2 cores: 2 thread(s) ..., passive wait'

The rule, from `python -m tools.bench contention` on a 2-core machine (README, "On a busy
machine"): threads that spin while they wait for each other (OpenMP's default) were fastest when
the machine was quiet (passive waiting cost the default MLP 1.3-1.9x) and collapsed in some rounds
while two busy processes held the cores. There, two passive threads were the transformer's fastest
fixed setting; the MLP's was two passive threads in one measurement and 1 thread in others, and no
one setting was fastest for both. So the thread count is this node's usable cores shared by its
ranks, and the wait turns passive when other programs held a quarter of a core or more (the noise
guard's threshold); then a lone rank's warm-up also tries 1 thread and keeps whichever ran its
steps faster (workbench.train.thread_trial). `run.threads`, $WORKBENCH_THREADS and an
OMP_WAIT_POLICY already in the environment are the user's choice and are kept.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, replace

from .contention import BUSY_CORES, ContentionMeter
from . import cpu

THREADS_ENV = "WORKBENCH_THREADS"  # the default of run.threads=0 for every run of a session
WAIT_ENV = "OMP_WAIT_POLICY"  # read once by OpenMP when torch is imported: set before a rank starts
TRIAL_ENV = "WORKBENCH_THREAD_TRIAL"  # thread counts the rank's warm-up tries in turn ("2,1")
TRIAL_WHY = "; the warm-up tries them and 1 thread in turn and keeps the faster"
READ_S = 0.2  # the shortest look at the machine: 40 clock ticks on 2 cores, 10 of them a quarter core


def thread_count(cfg) -> tuple[int, str]:
    """Intra-op threads of each process, and where the number comes from: run.threads; else
    $WORKBENCH_THREADS; else this node's usable cores shared by its ranks, so 1 process x 2 threads
    and 2 ranks x 1 thread use the same cores. (OMP_NUM_THREADS is not read: torchrun sets it to 1
    for every rank.)"""
    env = os.environ.get(THREADS_ENV, "")
    if cfg.run.threads:
        return cfg.run.threads, "run.threads"
    if env.isdigit() and int(env) > 0:
        return int(env), f"${THREADS_ENV}"
    cores, ranks = cpu.usable_cores(), cfg.distributed.nproc
    return max(1, cores // ranks), auto_source(cfg)


def rule_text(cfg) -> str:
    """The thread rule in words, as a script or a reader outside the workbench needs it: where the
    count comes from, what is not read, and how the threads wait."""
    fixed = f"here {cfg.run.threads}" if cfg.run.threads else "here 0: not set"
    return (
        f"Each process takes run.threads when it is set ({fixed}), else ${THREADS_ENV}, else the "
        "node's usable cores shared by its ranks; OMP_NUM_THREADS is not read (torchrun sets it to 1 "
        f"for every rank). Its threads wait passively ({WAIT_ENV}=PASSIVE) when other programs hold "
        f"{BUSY_CORES:g} cores or more as it starts, since spinning threads collapse then; "
        f"{WAIT_ENV} set in the environment is kept. The script prints what it chose and why."
    )


def auto_source(cfg) -> str:
    """Where the thread count comes from when the workbench chose it."""
    return f"{cpu.usable_cores()} usable core(s) shared by {cfg.distributed.nproc} rank(s)"


def threads_for(cfg) -> int:
    return thread_count(cfg)[0]


@dataclass(frozen=True)
class ThreadChoice:
    threads: int  # intra-op threads per rank
    wait_policy: str  # "passive", or "default" (OpenMP spins a while before it sleeps)
    why: str
    other_cpu_cores: float | None = None
    trial: tuple[int, ...] = ()  # thread counts the warm-up tries, keeping the faster (train.thread_trial)

    def env(self) -> dict[str, str]:
        """What the ranks' environment needs (nothing when the default stands)."""
        env = {WAIT_ENV: "PASSIVE"} if self.wait_policy == "passive" else {}
        if self.trial:
            env[TRIAL_ENV] = ",".join(map(str, self.trial))
        return env

    def fixed(self) -> "ThreadChoice":
        """The same choice without a trial: every run of a comparison then runs the same threads,
        so a ratio is of the change alone."""
        return replace(self, trial=(), why=self.why.removesuffix(TRIAL_WHY)) if self.trial else self

    def as_dict(self) -> dict:
        return asdict(self)


def wait_policy() -> str:
    """How this process's OpenMP threads wait, by its environment (read when torch was imported)."""
    return "passive" if os.environ.get(WAIT_ENV, "").upper() == "PASSIVE" else "default"


def other_cores_now(meter: ContentionMeter | None = None) -> float:
    """Cores other programs (outside this process and its children) held over the last READ_S at
    least: `meter` may have been started earlier, while this process did other work."""
    meter = meter or ContentionMeter()
    time.sleep(max(0.0, READ_S - meter.elapsed()))
    return meter.read()["other_cpu_cores"]


def waits_passively(threads: int, other_cpu_cores: float) -> bool:
    """The wait rule: several threads wait passively once other programs hold BUSY_CORES or more."""
    return threads > 1 and other_cpu_cores >= BUSY_CORES


def wait_advice(threads: int, other_cpu_cores: float) -> str | None:
    """For a process that chose its own threads (a user's script): what the rule would change, as
    something to measure, or None when it would change nothing."""
    if wait_policy() != "default" or not waits_passively(threads, other_cpu_cores):
        return None
    return (
        f"other programs held {other_cpu_cores:.1f} cores while {threads} threads waited by "
        f"spinning (OpenMP's default); the workbench's own runs wait passively here. Measure it: "
        f"workbench ab --cmd \"...\" --vs-env {WAIT_ENV}=PASSIVE"
    )


def choose_threads(cfg, other_cpu_cores: float) -> ThreadChoice:
    """The threads and wait policy for a run of `cfg` while others hold `other_cpu_cores`."""
    (threads, source), other = thread_count(cfg), other_cpu_cores
    held = f"other processes held {other:.1f} of {cpu.usable_cores()} cores"
    if os.environ.get(WAIT_ENV):
        policy, wait = wait_policy(), f"{WAIT_ENV}={os.environ[WAIT_ENV]} from the environment, kept"
    elif threads == 1:
        policy, wait = "default", "one thread never waits for another"
    elif waits_passively(threads, other):
        policy, wait = "passive", "passive wait: spinning threads collapse when others hold the cores"
    else:
        policy, wait = "default", "the default wait: spinning is fastest on a quiet machine"
    why = f"{held}: {threads} thread(s) per rank ({source}), {wait}"
    # which count runs faster under load depends on the model: a lone rank times both in its warm-up
    # (a compiled step would recompile for each count; ranks of one run would have to agree)
    trial = (
        policy == "passive"
        and not os.environ.get(WAIT_ENV)
        and source == auto_source(cfg)
        and cfg.distributed.nproc * cfg.distributed.nnodes == 1
        and not cfg.compile.enabled
    )
    return ThreadChoice(
        threads, policy, why + (TRIAL_WHY if trial else ""), round(other, 3), (threads, 1) if trial else ()
    )
