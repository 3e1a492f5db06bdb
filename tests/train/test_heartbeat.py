"""A rank's heartbeat says where its main thread is while a step runs."""

from __future__ import annotations

import time


def test_heartbeat_says_where_the_main_thread_is(tmp_path):
    from workbench.events import read_events
    from workbench.train.heartbeat import Heartbeat, LockedWriter

    writer = LockedWriter(tmp_path, 0, 0)
    writer.write("step", step=7)
    beat = Heartbeat(writer, interval_s=0.05)
    beat.start()

    def busy_in_forward():
        time.sleep(0.3)

    busy_in_forward()
    beat.stop()
    beat.join(2)
    writer.close()
    beats = [r for r in read_events(tmp_path) if r["event"] == "heartbeat"]
    assert beats and beats[-1]["step"] == 7
    assert any(r["where"].startswith("busy_in_forward (test_heartbeat.py:") for r in beats)
