"""The heartbeat: a line every few seconds while a blocking call runs, none once it returned."""

import time

from ragtrack.heartbeat import heartbeat


def test_a_blocking_call_is_announced_while_it_runs_and_not_after():
    heard: list[str] = []
    with heartbeat(heard.append, "loading the model", every=0.05):
        time.sleep(0.18)
    lines = len(heard)
    assert lines >= 2 and heard[0].startswith("… still loading the model (") and heard[0].endswith(" s)")
    time.sleep(0.15)
    assert len(heard) == lines  # the thread stopped with the block


def test_an_error_in_the_block_stops_the_heartbeat_and_propagates():
    heard: list[str] = []
    try:
        with heartbeat(heard.append, "x", every=0.02):
            raise ValueError("boom")
    except ValueError as e:
        assert str(e) == "boom"
    time.sleep(0.08)
    assert heard == []
