"""`workbench serve --replicas N`: N copies of the model behind Ray Serve, on a local Ray cluster
the command starts (this module runs in the command's process, the cluster's driver; each replica
is a Ray actor process). Ray Serve's HTTP proxy binds --host (127.0.0.1 unless told otherwise);
Ray's own services listen where Ray puts them, guarded by the cluster's token.

    serve_replicas(partial(served_in_replica, argv, plan, cwd), settings, plan, 2)

Ray Serve is the engine for serving past one machine: its proxy spreads requests over the
replicas, and the same deployment runs on a multi-machine cluster. Each replica runs the app
`workbench serve` runs (serving.app: the request checks, the batching, the health endpoint) on a
model it builds itself from the command's flags, with the thread plan chosen here for N processes.
Ctrl-C, SIGTERM or the starter's pipe closing shuts Serve and the cluster down: no process or port
is left.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..config import ConfigError
from ..machine import cpu
from ..net import free_port
from .bounds import Settings
from .workers import MAX_WORKERS, Worker

if TYPE_CHECKING:  # the driver builds no model: torch loads in the replicas
    from .served import Served

POLL_S = 0.5
QUIET = {"log_level": "WARNING"}  # Ray Serve's own lines: only what went wrong


def check_replicas(replicas: int, workers: int) -> int:
    if not 1 <= replicas <= MAX_WORKERS:
        raise ConfigError(f"--replicas must be 1-{MAX_WORKERS}, got {replicas}")
    if workers > 1:
        raise ConfigError(
            f"--replicas {replicas} with --workers {workers}: give one (replicas are Ray Serve's "
            "processes, workers the workbench's own on one socket)"
        )
    try:
        import ray.serve  # noqa: F401
    except ImportError:
        raise ConfigError("--replicas needs Ray Serve: pip install 'workbench[ray]'") from None
    return replicas


def replica_app(served_of: Callable[[], Served], plan: Worker, settings: Settings, driver: int):
    """The app of one replica (called by Ray Serve in the replica's process): the model
    `served_of()` builds here, behind the app `workbench serve` runs."""
    from .app import make_app
    from .batching import Batcher

    served = served_of()
    # a load counts the driver's tree (the cluster, the replicas) as the server
    about = {**settings.about(plan.why), "pid": driver, "replica": f"pid {os.getpid()}"}
    batcher = Batcher(served.forward, settings.max_batch, settings.max_wait_ms)
    return make_app(served, batcher, about, settings.token)


def serve_replicas(served_of: Callable[[], Served], settings: Settings, plan: Worker, replicas: int) -> int:
    """Serve the model `served_of()` builds (called in each replica, so it must pickle: a
    module's function, or a partial of one) in `replicas` Ray Serve replicas until stopped;
    returns 0."""
    import ray
    from ray import serve

    port = settings.port or free_port(settings.host)  # Ray Serve's proxy binds it: no port 0 there
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    # a cluster of this machine; Ray gives its node the machine's reachable address whatever it is
    # told (a cluster spans machines), so only the HTTP proxy is held to --host
    ray.init(
        num_cpus=cpu.usable_cores(),
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    try:
        serve.start(http_options={"host": settings.host, "port": port}, logging_config=QUIET)
        driver = os.getpid()

        def build():  # a function of no arguments: Ray Serve calls it in each replica for its app
            return replica_app(served_of, plan, settings, driver)

        deployment = serve.deployment(
            serve.ingress(build)(),
            name="workbench",
            num_replicas=replicas,
            ray_actor_options={"num_cpus": 0},  # the threads are the plan's: Ray only places them
        )
        try:
            serve.run(deployment.bind(), name="workbench", route_prefix="/", logging_config=QUIET)
        except RuntimeError as e:  # a replica's constructor raised: Ray Serve gives up on the app
            said = serve.status().applications.get("workbench")
            text = "\n".join(d.message for d in said.deployments.values()) if said else str(e)
            raise ConfigError(f"the replicas could not build the model: {replica_error(text)}") from None
        url = f"http://{settings.host}:{port}"
        health = read_health(url, settings.token)
        print(f"threads: {plan.why}", flush=True)
        print(
            f"serving {health['model']} ({health['variant']}) at {url} (POST /predict, GET /health); "
            f"batching {settings.batching()}; {replicas} Ray Serve replica{'s' if replicas > 1 else ''} "
            f"(Ray {ray.__version__}, driver pid {os.getpid()})",
            flush=True,
        )
        while not stop.wait(POLL_S):
            pass
        return 0
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def replica_error(text: str) -> str:
    """The replica's own error out of Ray Serve's report of a failed deployment (the message of
    its last line naming an error), or the report's last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    named = [line.split("Error: ", 1)[1] for line in lines if "Error: " in line]
    return (named or lines or ["(no message)"])[-1]


def read_health(url: str, token: str | None) -> dict:
    """What a replica says of itself once Ray Serve says the deployment is up."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(
            urllib.request.Request(f"{url}/health", headers=headers), timeout=60
        ) as r:
            return json.loads(r.read())
    except urllib.error.URLError as e:  # an HTTPError too: a replica that could not build its app
        raise ConfigError(f"the replicas did not answer {url}/health: {e}") from None
