"""Real servers (`workbench serve` in processes of their own) and real clients: a run's trained
model, an own model from a file factory with its weights, each answered as the model answers in
process; bad requests refused in one line while the server goes on serving; every request of a
load run accounted for; a server killed mid-load makes `workbench load` fail and say so; nothing
left behind."""

from __future__ import annotations

import http.client
import asyncio
import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import psutil
import pytest
import torch

from launch_helpers import wait_for
from workbench.config import RunConfig
from workbench.distributed.launch import run
from workbench.events import read_events
from workbench.runstore import list_runs, read_summary
from workbench.serving.bounds import MAX_BODY
from workbench.serving.process import ServerProcess, servers_running
from workbench.train.restore import load_model

pytestmark = pytest.mark.slow


def post(url: str, body: bytes, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{url}/predict", data=body, headers={"content-type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def health(url: str, headers: dict | None = None) -> dict:
    with urllib.request.urlopen(
        urllib.request.Request(f"{url}/health", headers=headers or {}), timeout=30
    ) as r:
        return json.loads(r.read())


def gone(server: ServerProcess) -> None:
    """The process has exited and its port is free again."""
    port = int(server.url.rsplit(":", 1)[1])
    assert not psutil.pid_exists(server.proc.pid) or psutil.Process(server.proc.pid).status() == "zombie"
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_a_runs_trained_model_and_an_own_model_answer_as_they_do_in_process(tmp_path):
    done = run(RunConfig.smoke().replace(**{"run.steps": 5}))
    trained = load_model(done["run_dir"])
    x = torch.rand(3, 1, 8, 8)
    with ServerProcess([done["run_dir"], "--max-batch", "4", "--max-wait-ms", "2"]) as server:
        said = health(server.url)
        assert said["input"]["shape"] == [1, 8, 8] and "up to 4 samples" in said["batching"]
        status, answer = post(server.url, json.dumps({"inputs": x.tolist()}).encode())
        assert status == 200
        torch.testing.assert_close(torch.tensor(answer["outputs"]), trained(x), atol=1e-5, rtol=1e-4)
    gone(server)

    (tmp_path / "tiny.py").write_text(
        "from torch import nn\n\ndef build(input_shape, num_classes):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.Tanh(), nn.Linear(16, num_classes))\n"
    )
    own = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.Tanh(), torch.nn.Linear(16, 10)
    )
    torch.save(own.state_dict(), tmp_path / "tiny.pt")
    args = [
        "--model",
        f"{tmp_path / 'tiny.py'}:build",
        "--data",
        "digits",
        "--weights",
        str(tmp_path / "tiny.pt"),
    ]
    with ServerProcess(args, env={"WORKBENCH_TRUST_CODE": "1"}) as server:
        status, answer = post(server.url, json.dumps({"inputs": x[0].tolist()}).encode())
        assert status == 200
        torch.testing.assert_close(torch.tensor(answer["outputs"]), own(x[:1])[0], atol=1e-5, rtol=1e-4)
    gone(server)


def test_bad_requests_get_one_line_each_and_the_server_goes_on(tmp_path):
    sample = json.dumps({"inputs": [[[0.5] * 8] * 8]}).encode()
    with ServerProcess(["--max-batch", "8", "--max-wait-ms", "1"]) as server:
        url, port = server.url, int(server.url.rsplit(":", 1)[1])
        cases = [
            (b"{not json", 400, "the body is not JSON"),
            (json.dumps({"inputs": [1, 2, 3]}).encode(), 422, "inputs has shape [3]"),
            (json.dumps({"inputs": [[1, 2], [3]]}).encode(), 422, "not a rectangular array"),
            (b'{"inputs": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400, "nested too deeply"),
        ]
        for body, status, words in cases:
            got, answer = post(url, body)
            assert got == status and words in answer["error"] and "\n" not in answer["error"], answer
        # a body declared past the limit is refused from its headers, before it is sent; one past
        # it with no length declared (chunked) as it arrives
        heads = [
            b"content-length: %d\r\n\r\n" % (MAX_BODY + 1),
            b"transfer-encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (MAX_BODY + 1, b"y" * (MAX_BODY + 1)),
        ]
        for head in heads:
            with socket.create_connection(("127.0.0.1", port)) as s:
                try:
                    s.sendall(b"POST /predict HTTP/1.1\r\nhost: x\r\n" + head)
                except OSError:
                    pass  # the server answered and closed while this client still sent
                answer = http.client.HTTPResponse(s)
                answer.begin()
                assert answer.status == 413, answer.status
                assert f"at most {MAX_BODY:,} per request" in json.loads(answer.read())["error"]
        # a client that sends half its body and leaves
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"POST /predict HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n{\"inputs\": [")
        # a flood: 10,000 requests at 64 at once, every one answered or refused, none lost
        flood = subprocess.run(
            [
                sys.executable,
                "-m",
                "workbench",
                "load",
                url,
                "--concurrency",
                "64",
                "--requests",
                "10000",
                "--warmup-s",
                "0",
                "--duration-s",
                "120",
                "--run-dir",
                str(tmp_path / "flood"),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert flood.returncode == 0, flood.stderr
        report = json.loads(flood.stdout)
        level = report["levels"][0]
        assert level["sent"] == 10_000 == level["answered"] + level["refused"] + level["failed"]
        assert level["failed"] == 0 and level["answered"] == 10_000, level
        # the load is a run: each measured second a step, its report beside them, listed as any run
        assert report["run_dir"] == str(tmp_path / "flood")
        assert json.loads((tmp_path / "flood" / "load.json").read_text())["levels"] == report["levels"]
        assert read_summary(tmp_path / "flood")["status"] == "completed"
        seconds = [r for r in read_events(tmp_path / "flood") if r["event"] == "step"]
        assert seconds and all(r["concurrency"] == 64 and r["p99_ms"] >= r["p50_ms"] > 0 for r in seconds)
        answered_in_steps = sum(round(r["samples_per_s"] * r["step_time_ms"] / 1e3) for r in seconds)
        assert 0 < answered_in_steps <= 10_000
        assert list_runs(tmp_path)["run"].tolist() == ["flood"]
        status, answer = post(url, sample)  # still serving, and it counted what it refused
        assert status == 200 and len(answer["outputs"]) == 10
        said = health(url)
        assert said["refused"] >= len(cases) + 1 and said["answered"] >= 10_001
    gone(server)


def test_a_token_is_asked_for_and_checked(tmp_path):
    with ServerProcess(["--token", "s3cret"]) as server:
        with pytest.raises(urllib.error.HTTPError) as refused:
            health(server.url)
        assert refused.value.code == 401
        assert "Authorization: Bearer" in json.loads(refused.value.read())["error"]
        assert health(server.url, {"authorization": "Bearer s3cret"})["status"] == "ok"
    gone(server)


def test_a_server_killed_mid_load_makes_the_load_fail_and_say_so(tmp_path):
    server = ServerProcess([])
    load = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workbench",
            "load",
            server.url,
            "--concurrency",
            "4",
            "--duration-s",
            "60",
            "--warmup-s",
            "0",
            "--run-dir",
            str(tmp_path / "load"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: health(server.url)["answered"] >= 50, 120, "the load to reach the server", 0.2)
        server.proc.kill()
        out, _ = load.communicate(timeout=120)
    finally:
        load.kill()
        server.stop()
    assert load.returncode == 1, out
    assert "request(s) got no answer" in out, out
    assert any(cause in out for cause in ("ClientConnectorError", "ServerDisconnectedError")), out
    summary = read_summary(tmp_path / "load")  # the run folder keeps its seconds and says why it failed
    assert summary["status"] == "failed" and "got no answer" in summary["message"], summary
    assert any(r["event"] == "step" for r in read_events(tmp_path / "load"))
    gone(server)


def test_servers_compared_side_by_side_an_a_a_within_noise(tmp_path):
    """Two warm servers of the same settings, started together, slices of load alternating: they
    come out within noise, and the comparison says so in the engine's words, with its pairs."""
    from workbench.serving.side_by_side import compare_servers

    with servers_running({"A": [], "A again": []}) as servers:
        a, same = servers.values()
        report = compare_servers({"A": a.url, "A again": same.url}, concurrency=8, rounds=6, slice_s=1.0)
    again = report["variants"]["A again"]
    assert again["threads"] and again["threads"] == report["variants"]["A"]["threads"]  # one reading
    assert again["throughput_verdict"] == "within noise", again["text"]
    assert "over 6 pairs" in again["text"] or "dropped" in again["text"]
    assert again["sent"] == again["answered"] + again["refused"] + again["failed"] and again["failed"] == 0
    gone(a)
    gone(same)


@pytest.mark.alone
def test_a_serving_a_a_beside_two_busy_processes_is_within_noise(tmp_path):
    from workbench.procs import OtherWork
    from workbench.serving.side_by_side import compare_servers

    # started together, the servers choose their threads from one reading of the load, so they
    # differ in nothing; 12 pairs: a busy machine's pairs spread wider than a quiet one's
    with servers_running({"A": [], "A again": []}) as servers, OtherWork(2) as hogs:
        a, same = servers.values()
        report = compare_servers({"A": a.url, "A again": same.url}, concurrency=8, rounds=12, slice_s=1.0)
        assert hogs.alive()
    again = report["variants"]["A again"]
    assert again["threads"] == report["variants"]["A"]["threads"], again["threads"]
    assert again["throughput_verdict"] == "within noise", again["text"]
    assert "beside other programs" in again["text"], again["text"]  # the busy pairs are said


def test_an_export_is_served_with_the_weights_its_train_py_wrote(tmp_path):
    from workbench.export import export
    from workbench.train.data import build_data
    from workbench.train.models import build_model

    cfg = RunConfig.smoke()
    bundle = tmp_path / "bundle"
    export(cfg, bundle)
    trained = subprocess.run(
        [sys.executable, "train.py", "--steps", "3"], cwd=bundle, capture_output=True, text=True
    )
    assert trained.returncode == 0, trained.stderr
    model = build_model(cfg, build_data(cfg))
    model.load_state_dict(torch.load(bundle / "out" / "model.pt", weights_only=True))
    x = torch.rand(2, 1, 8, 8)
    with ServerProcess([str(bundle)]) as server:
        status, answer = post(server.url, json.dumps({"inputs": x.tolist()}).encode())
        assert status == 200
        torch.testing.assert_close(torch.tensor(answer["outputs"]), model.eval()(x), atol=1e-5, rtol=1e-4)
    gone(server)


def test_workers_share_one_port_and_end_together(tmp_path):
    """--workers 2: two processes answer on one port, the cores shared between them by the thread
    rule; stopping the parent stops both, and a worker that dies takes the rest down with it."""
    with ServerProcess(["--workers", "2", "--max-batch", "4", "--max-wait-ms", "1"]) as server:
        workers = psutil.Process(server.proc.pid).children()
        assert len(workers) == 2, workers
        said = health(server.url)
        assert said["pid"] == server.proc.pid and said["worker"].split(" (")[0] in ("1 of 2", "2 of 2")
        assert "for 2 server processes" in said["threads"]
        assert any("2 worker processes" in line for line in server.lines), server.lines
        sample = json.dumps({"inputs": [[[0.5] * 8] * 8]}).encode()
        assert post(server.url, sample)[0] == 200
    gone(server)
    assert not any(psutil.pid_exists(w.pid) and w.status() != "zombie" for w in workers)

    server = ServerProcess(["--workers", "2"])
    try:
        workers = psutil.Process(server.proc.pid).children()
        workers[0].kill()
        assert server.proc.wait(timeout=60) == 1
        said = server.later_lines()
    finally:
        server.stop()
    named = f"(pid {workers[0].pid}) ended with code -9: stopping the others"
    assert any(named in line for line in said), said
    gone(server)
    assert not any(psutil.pid_exists(w.pid) and w.status() != "zombie" for w in workers)


def test_replicas_behind_ray_serve_answer_and_leave_nothing_behind(tmp_path):
    """--replicas 2: a local Ray cluster started by the command, the model in two Ray Serve
    replicas behind its proxy on 127.0.0.1, each running the workbench's app (request checks,
    batching, health); a load is answered by both, and Ctrl-C leaves no process and no port."""
    pytest.importorskip("ray.serve", reason="the ray extra (pip install 'workbench[ray]')")
    from workbench.serving.load_generator import Level, drive

    with ServerProcess(["--replicas", "2", "--max-batch", "4", "--max-wait-ms", "2"]) as server:
        tree = [server.proc, *psutil.Process(server.proc.pid).children(recursive=True)]
        assert server.url.startswith("http://127.0.0.1:")
        assert any("2 Ray Serve replicas" in line for line in server.lines), server.lines
        said = health(server.url)
        assert said["pid"] == server.proc.pid and "for 2 server processes" in said["threads"]
        assert said["batching"] == "up to 4 samples, waiting at most 2 ms"
        status, answer = post(server.url, b'{"inputs": [1, 2]}')  # the workbench's own checks
        assert status == 422 and "this model takes [1, 8, 8]" in answer["error"], answer
        report = asyncio.run(drive(server.url, [Level("concurrency", 4)], 5.0, 0.5, requests=400))
        level = report["levels"][0]
        assert level["failed"] == 0 and level["sent"] == level["answered"] + level["refused"] > 0
        replicas = {health(server.url)["replica"] for _ in range(40)}
        assert len(replicas) == 2, replicas  # the proxy spreads requests over both
    gone(server)
    assert not any(psutil.pid_exists(p.pid) and p.status() != "zombie" for p in tree)
