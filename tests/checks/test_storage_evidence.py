"""The evidence a power cut leaves, read from a real History as a run records it."""

from __future__ import annotations

import time

from pytest_shadowcheck.checks.storage import power_cut_evidence, queue_id
from pytest_shadowcheck.history import History


def test_queue_ids_are_read_from_the_250() -> None:
    assert queue_id("2.0.0 Ok: queued as 10BA021412F") == "10BA021412F"
    assert queue_id("OK id=1tYz8x-000Abc-1x") == "1tYz8x-000Abc-1x"
    assert queue_id("Message accepted for delivery") is None


def test_the_file_holding_the_message_and_the_missing_fsync_are_named() -> None:
    history = History()
    now = time.monotonic()
    history.record_at(now - 0.2, "storage", node="mbx1", what="sync", file="active/OTHER", bytes=9)
    acked = history.now()
    history.record_at(
        now + 0.05,
        "storage",
        node="mbx1",
        what="power_cut",
        lost=[
            {"file": "active/10BA021412F", "bytes": 2555},
            {"file": "pid/master.pid", "bytes": 4},
        ],
        undone=[],
    )
    text = power_cut_evidence(history, ["mbx1"], acked, "Ok: queued as 10BA021412F", "m1")
    assert "mbx1 lost power at +" in text
    assert "the queue file holding m1 (queue ID 10BA021412F)" in text
    assert "active/10BA021412F (2,555 bytes)" in text
    assert text.endswith("no fsync of it preceded the 250")


def test_without_a_queue_id_the_lost_files_are_listed_and_other_nodes_ignored() -> None:
    history = History()
    acked = history.now()
    later = time.monotonic() + 0.1
    lost = [{"file": "mbx1/queue.db-wal", "bytes": 8240}]
    history.record_at(later, "storage", node="mbx1", what="power_cut", lost=lost, undone=[])
    history.record_at(later, "storage", node="mbx9", what="power_cut", lost=lost, undone=[])
    text = power_cut_evidence(history, ["mbx1"], acked, "250 2.0.0 queued", "m1")
    assert "8,240 bytes its disk had not made durable were lost: mbx1/queue.db-wal" in text
    assert "mbx9" not in text
    assert power_cut_evidence(history, ["mbx2"], acked, "", "m1") == ""


def test_a_queue_directory_named_in_the_250_holds_the_message() -> None:
    history = History()
    acked = history.now()
    lost = [
        {"file": "queue/98/98b30d05/message", "bytes": 1702},
        {"file": "queue/11/11aa22bb/message", "bytes": 900},
    ]
    history.record_at(time.monotonic() + 0.1, "storage", node="mbx1", what="power_cut", lost=lost)
    text = power_cut_evidence(
        history, ["mbx1"], acked, "2.0.0 98b30d05 Message accepted for delivery", "m1"
    )
    assert "the queue file holding m1 (queue ID 98b30d05)" in text
    assert "queue/98/98b30d05/message (1,702 bytes)" in text
    assert "11aa22bb" not in text
