"""Event files: writer limits, torn-line tolerance, multi-rank tailing and the tailer thread."""

import json

from workbench.events import (
    ADDRESSES,
    MAX_LINE,
    NODE,
    READY,
    START,
    EventWriter,
    FileTail,
    RunTail,
    check_record,
    read_events,
)


def test_writer_records_carry_event_time_rank_attempt(tmp_path):
    w = EventWriter(tmp_path, rank=1, attempt=2)
    w.write("step", step=1, loss=0.5, step_time_ms=1.25)
    w.close()
    (rec,) = [json.loads(line) for line in (tmp_path / "rank1.jsonl").read_text().splitlines()]
    assert rec["event"] == "step" and rec["rank"] == 1 and rec["attempt"] == 2
    assert rec["loss"] == 0.5 and rec["t"] > 0


def test_long_fields_are_cut_from_the_front_to_stay_under_4k(tmp_path):
    w = EventWriter(tmp_path)
    w.write("error", traceback="x" * 10000 + "THE END", message="m")
    w.close()
    line = (tmp_path / "rank0.jsonl").read_text()
    assert len(line) < 4096 and len(line) <= MAX_LINE + 1
    rec = json.loads(line)
    assert rec["traceback"].endswith("THE END") and rec["traceback"].startswith("...")


def test_nonfinite_values_survive_the_round_trip(tmp_path):
    w = EventWriter(tmp_path)
    w.write("step", step=1, loss=float("nan"), grad_scale=float("inf"))
    w.close()
    (rec,) = read_events(tmp_path)
    assert rec["loss"] != rec["loss"] and rec["grad_scale"] == float("inf")


def test_the_node_and_the_addresses_that_readers_act_on_are_checked():
    """The fault diagnosis matches a start record's node against srun's; the watchdog probes the
    addresses a ready record lists: a record whose values they cannot use is refused, named."""
    assert check_record({"event": START, NODE: "node1"}) is None
    assert check_record({"event": READY, ADDRESSES: ["10.0.0.1", ""]}) is None
    assert check_record({"event": START, NODE: 3}) == "'node' is not a non-empty string, got 3"
    assert check_record({"event": READY, ADDRESSES: "10.0.0.1"}) == (
        "'addresses' is not a list of strings, got '10.0.0.1'"
    )


def test_torn_last_line_is_buffered_until_its_newline(tmp_path):
    path = tmp_path / "rank0.jsonl"
    tail = FileTail(path)
    assert tail.poll() == []  # file not there yet
    full = json.dumps({"event": "step", "step": 1}) + "\n"
    torn = json.dumps({"event": "step", "step": 2})
    path.write_text(full + torn[:7])
    assert [r["step"] for r in tail.poll()] == [1]
    with open(path, "a") as f:
        f.write(torn[7:])
    assert tail.poll() == []  # still no newline
    with open(path, "a") as f:
        f.write("\n")
    assert [r["step"] for r in tail.poll()] == [2]


def test_garbage_lines_are_skipped_not_fatal(tmp_path):
    (tmp_path / "rank0.jsonl").write_text('{"event":"a"}\nnot json\n[1,2]\n{"event":"b"}\n')
    assert [r["event"] for r in read_events(tmp_path)] == ["a", "b"]


def test_run_tail_picks_up_ranks_as_they_appear_in_time_order(tmp_path):
    tail = RunTail(tmp_path)
    (tmp_path / "rank0.jsonl").write_text('{"event":"step","step":1,"t":2,"rank":0}\n')
    assert len(tail.poll()) == 1
    (tmp_path / "rank1.jsonl").write_text('{"event":"step","step":1,"t":1,"rank":1}\n')
    with open(tmp_path / "rank0.jsonl", "a") as f:
        f.write('{"event":"step","step":2,"t":3,"rank":0}\n')
    assert [r["t"] for r in tail.poll()] == [1, 3]
