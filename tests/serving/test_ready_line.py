"""The line a server prints once it takes requests, as its starters read it."""

from workbench.serving.process import READY


def test_the_ready_line_of_a_server_a_parent_of_workers_and_a_plain_endpoint():
    one = READY.match(
        "serving mlp (eager) at http://127.0.0.1:8700 (POST /predict, GET /health); "
        "batching off (one forward a request)"
    )
    assert (one["name"], one["url"], one["batching"]) == (
        "serving mlp (eager)",
        "http://127.0.0.1:8700",
        "off (one forward a request)",
    )
    workers = READY.match(
        "serving mlp (int8) at http://127.0.0.1:41 (POST /predict, GET /health); batching up to 8 "
        "samples, waiting at most 5 ms; 2 worker processes (pids 7, 8)"
    )
    assert workers["url"] == "http://127.0.0.1:41" and workers["batching"].startswith("up to 8 samples")
    plain = READY.match("serving noop at http://127.0.0.1:5 (plain FastAPI)")  # the benchmark's own
    assert plain["url"] == "http://127.0.0.1:5" and plain["batching"] is None
    assert READY.match("INFO serving started") is None
