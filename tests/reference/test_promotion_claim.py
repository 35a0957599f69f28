"""Two SMTP-in workers of one node promote the same stale copies at once: only one may
queue each (PR-2 without a duplicate).

In workers mode (SmtpInProcesses >= 2) every worker answers discard exchanges, and two
answers naming the primary's new queue database can arrive together: both workers read
the same stale copies. The node's queue database is real (two connections to one file,
as two worker processes have); the node around it is the narrow interface shadowing sees
(reference_impl/ports.py), with a clock and a plan for every recipient.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from reference_impl.queue_db import Message, QueueDB
from reference_impl.shadowing import Shadowing


class _Worker:
    """One SMTP-in worker's view of the node: its own connection to the queue database."""

    def __init__(self, path: Path) -> None:
        self.db = QueueDB(path, time.time())
        self.stats: dict[str, int] = {"promoted": 0}
        self.clock = type("Clock", (), {"now": staticmethod(time.time), "mode": "real"})()

    def categorise(self, recipients: list[str]) -> tuple[dict[str, list[str]], list[str]]:
        return {"corp.test": list(recipients)}, []

    def route(self, domain: str) -> Any:
        return None

    def enqueue(self, message: Message, plan: dict[str, list[str]]) -> None:
        self.db.enqueue(message, {d: (r, []) for d, r in plan.items()}, self.clock.now())


def test_two_workers_promoting_the_same_stale_copy_queue_it_once(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite"
    first, second = _Worker(path), _Worker(path)
    first.db.add_shadow(
        {
            "primary_node": "mbx2", "primary_db_id": "old-db", "primary_msg": "p1",
            "message_id": "<m1@corp.test>", "sender": "s@ext.test",
            "recipients": ["alice@corp.test"], "next_hops": ["corp.test"],
            "content": b"Subject: m1\r\n\r\nbody\r\n", "received_at": time.time(),
        }
    )  # fmt: skip
    # both read the copies of the old database before either promotes
    stale_first = first.db.stale_shadows("mbx2", "new-db")
    stale_second = second.db.stale_shadows("mbx2", "new-db")
    assert len(stale_first) == len(stale_second) == 1
    promoted = [
        Shadowing(worker).promote("mbx2", "new database", stale, primary_failed=False)  # type: ignore[arg-type]
        for worker, stale in ((first, stale_first), (second, stale_second))
    ]
    assert sorted(promoted) == [0, 1]
    queued = first.db.conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    assert queued == 1, f"the copy was queued {queued} times"
