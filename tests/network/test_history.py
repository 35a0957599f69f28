from __future__ import annotations

import itertools
import json
import threading
import time
from pathlib import Path

import pytest

from pytest_shadowcheck.history import EVENT_KINDS, Event, History


def test_record_stamps_monotonic_time_and_keeps_order() -> None:
    history = History()
    first = history.record("step", text="send m1")
    time.sleep(0.01)
    second = history.record("line", "client->mbx1", 1, "c2s", text="EHLO client.test")
    assert 0 <= first.t < second.t <= history.now()
    assert history.events() == [first, second]
    assert second == Event(second.t, "line", "client->mbx1", 1, "c2s", {"text": "EHLO client.test"})


def test_events_are_frozen() -> None:
    event = History().record("note", text="x")
    with pytest.raises(AttributeError):
        event.kind = "step"  # type: ignore[misc]


def test_unknown_kind_and_direction_are_rejected() -> None:
    history = History()
    with pytest.raises(ValueError, match="unknown event kind"):
        history.record("lines")
    with pytest.raises(ValueError, match="direction"):
        history.record("line", direction="up")
    assert len(history) == 0


def test_filters_by_kind_link_and_time_window() -> None:
    history = History()
    a = history.record("line", "client->mbx1", 1, "c2s", text="MAIL FROM:<a@x>")
    time.sleep(0.02)
    b = history.record("line", "mbx1->mbx2", 1, "c2s", text="XSHADOW mbx1")
    c = history.record("fault", "mbx1->mbx2", fault="cut", on=True)
    assert history.events(kind="line") == [a, b]
    assert history.events(link="mbx1->mbx2") == [b, c]
    assert history.events(kind="line", link="mbx1->mbx2") == [b]
    assert history.events(since=b.t) == [b, c]
    assert history.events(until=a.t) == [a]


def test_excerpt_formats_lines_a_mail_admin_can_read() -> None:
    history = History()
    history.record("step", text="cut mbx1->mbx2")
    history.record("line", "mbx1->mbx2", 3, "c2s", text="XSHADOWCOPY 42")
    history.record("line", "mbx1->mbx2", 3, "s2c", text="250 2.0.0 OK")
    history.record("data", "mbx1->mbx2", 3, "c2s", size=1234, message_id="<m1@test>")
    history.record("line", "client->mbx1", 1, "s2c", text="451 4.4.0 Message failed")
    history.record("reply", "client->mbx1", 1, "s2c", command="EOD", code=451,
                   enhanced="4.4.0", text="4.4.0 Message failed")
    history.record("fault", "mbx1->mbx2", fault="delay", on=True, flow="c2s", seconds=0.5)
    text = history.excerpt(around=history.now(), links=["mbx1->mbx2"])
    lines = text.splitlines()
    assert lines[0].endswith("- STEP cut mbx1->mbx2")
    assert lines[1].startswith("  +") and lines[1].endswith("s mbx1->mbx2 #3 C: XSHADOWCOPY 42")
    assert lines[2].endswith("mbx1->mbx2 #3 S: 250 2.0.0 OK")
    assert "1234 bytes" in lines[3] and "<m1@test>" in lines[3]
    assert "FAULT delay ON flow=c2s seconds=0.5" in lines[4]
    assert "client->mbx1" not in text  # filtered out
    everything = history.excerpt(around=history.now())
    assert "client->mbx1 #1 S: 451 4.4.0 Message failed" in everything
    assert "client got 451 4.4.0 Message failed (to EOD)" in everything


def test_excerpt_window_and_limit() -> None:
    history = History()
    early = history.record("note", text="early")
    time.sleep(0.3)
    for i in range(10):
        history.record("line", "l", 1, "c2s", text=f"NOOP {i}")
    around = history.now()
    text = history.excerpt(around=around, before=0.1, after=0.1)
    assert "early" not in text
    assert "NOOP 9" in text
    limited = history.excerpt(around=around, before=5, after=5, limit=3)
    assert len(limited.splitlines()) == 4
    assert "8 more event(s)" in limited
    assert "NOOP 9" in limited and "NOOP 0" not in limited
    assert history.excerpt(around=early.t + 100) == "  (no events)"


def test_json_round_trip(tmp_path: Path) -> None:
    history = History()
    history.record("delivery", "mbx1->corp.test", sink="corp.test", message_id="<m@x>",
                   rcpt_tos=["a@corp.test"], raw=b"Subject: hi\r\n")
    history.record("snapshot", node="mbx1", queues={"shadow": []})
    path = history.write_json(tmp_path / "out" / "history.json")
    loaded = json.loads(path.read_text())
    assert loaded["started_at"] == pytest.approx(history.started_at)
    assert [e["kind"] for e in loaded["events"]] == ["delivery", "snapshot"]
    assert loaded["events"][0]["data"]["raw"] == "Subject: hi\r\n"
    assert loaded["events"][0]["link"] == "mbx1->corp.test"
    assert loaded["events"][1]["data"]["queues"] == {"shadow": []}
    assert history.to_jsonable() == loaded


def test_a_written_history_reads_back_as_it_was_measured(tmp_path: Path) -> None:
    history = History()
    origin = time.monotonic() - history.now()
    history.record_at(origin + 1.0, "step", text="kill mbx1")
    history.record_at(origin + 2.0, "lag", late=0.3)
    history.record_at(origin + 2.5, "wait", node="mbx1", waited=0.02, over=0.1)
    again = History.read_json(history.write_json(tmp_path / "history.json"))
    assert again.to_jsonable() == history.to_jsonable()
    assert again.started_at == history.started_at
    # the machine's lateness over a window, as a timing check reads it afterwards
    late = again.lateness(1.0, 3.0)
    assert late.total == pytest.approx(history.lateness(1.0, 3.0).total)
    assert late.harness == pytest.approx(0.3)
    assert dict(late.waits) == pytest.approx({"mbx1": 0.02})


def test_concurrent_records_are_all_kept() -> None:
    history = History()

    def writer(n: int) -> None:
        for i in range(500):
            history.record("note", text=f"{n}-{i}")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    events = history.events()
    assert len(events) == 2000
    assert all(a.t <= b.t for a, b in itertools.pairwise(events))


def test_event_kinds_cover_the_contract() -> None:
    assert {"connect", "close", "shutdown", "line", "data", "fault", "reply", "attempt", "delivery",
            "step", "snapshot", "note", "storage", "lag", "wait"} == EVENT_KINDS


def test_an_event_from_another_process_goes_in_at_its_time() -> None:
    history = History()
    first = history.record("step", text="send m1")
    time.sleep(0.01)
    last = history.record("step", text="power_cut mbx1")
    # a filesystem process stamped a sync with its own monotonic clock, between the two
    between = time.monotonic() - history.now() + (first.t + last.t) / 2
    synced = history.record_at(between, "storage", node="mbx1", what="sync", file="q", bytes=3)
    assert history.events() == [first, synced, last]
