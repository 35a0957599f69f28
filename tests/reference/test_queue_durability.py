"""Group commit of the queue database (wal_sync.py): no acknowledgement before the fsync.

These run the real QueueDB on a real SQLite file. What they can prove from
inside one process is the ordering: ``flushed()`` returns only after an
fsync of the live WAL file that started after the commit, and concurrent
commits share flushes. That the data then survives a kill -9 is proven by
the cluster tests (test_promotion.py, test_kill_during_data_...).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import sqlite3
from pathlib import Path

from reference_impl.queue_db import Message, QueueDB, new_id
from reference_impl.wal_sync import WalSync

SENDER: contextvars.ContextVar[str] = contextvars.ContextVar("SENDER", default="")


def _message(n: int) -> Message:
    return Message(
        id=new_id(),
        message_id=f"<m{n}@test>",
        sender="s@outside.test",
        recipients=["alice@corp.test"],
        content=b"Message-ID: <m%d@test>\r\n\r\nbody\r\n" % n,
        received_at=1000.0 + n,
        origin="received",
    )


def test_flushed_returns_after_an_fsync_that_follows_the_commit(tmp_path: Path) -> None:
    db = QueueDB(tmp_path / "queue.db", 1000.0)
    try:
        flushes_before = db.wal.flushes
        message = _message(1)

        async def receive() -> tuple[int, int]:
            db.enqueue(message, {"corp.test": (["alice@corp.test"], [])}, 1000.0)
            ticket = db._ticket
            synced_at_commit = db.wal.synced
            await db.flushed()
            return ticket, synced_at_commit

        ticket, synced_at_commit = asyncio.run(receive())
        # The commit's ticket was not yet redeemed when it committed ...
        assert synced_at_commit < ticket
        # ... and is once flushed() returned, by an fsync of its own batch.
        assert db.wal.synced >= ticket
        assert db.wal.flushes > flushes_before
        # The fsynced descriptor is the WAL SQLite writes (same inode).
        assert db.wal._fd is not None
        assert os.fstat(db.wal._fd).st_ino == os.stat(f"{tmp_path / 'queue.db'}-wal").st_ino
        # And another connection reads the message.
        other = sqlite3.connect(tmp_path / "queue.db")
        assert other.execute("SELECT id FROM messages").fetchall() == [(message.id,)]
        other.close()
    finally:
        db.close()


def test_concurrent_commits_share_flushes(tmp_path: Path) -> None:
    db = QueueDB(tmp_path / "queue.db", 1000.0)
    sessions = 50
    try:
        flushes_before = db.wal.flushes

        async def one(n: int) -> None:
            db.enqueue(_message(n), {"corp.test": (["alice@corp.test"], [])}, 1000.0)
            await db.flushed()

        async def all_sessions() -> None:
            # The flusher thread is kept busy (it needs this lock to take the next
            # batch) while the 50 commits are made, as a slow fsync would keep it:
            # how many commits share a flush then does not depend on the machine's load.
            with db.wal._lock:
                waiting = [asyncio.ensure_future(one(n)) for n in range(sessions)]
                await asyncio.sleep(0)  # each session commits and waits for its flush
                assert db.wal.synced < db._ticket
            await asyncio.gather(*waiting)

        asyncio.run(all_sessions())
        flushes = db.wal.flushes - flushes_before
        # one flush for the whole batch, perhaps one more already under way before it
        assert 1 <= flushes <= 2, flushes
        assert len(db.messages()) == sessions
    finally:
        db.close()


def test_bookkeeping_takes_no_ticket_but_rides_on_the_next_flush(tmp_path: Path) -> None:
    db = QueueDB(tmp_path / "queue.db", 1000.0)
    try:
        message = _message(1)
        db.enqueue(message, {"corp.test": (["alice@corp.test"], [])}, 1000.0)
        durable_ticket = db._ticket
        db.fork_done(message.id, "corp.test", "delivered", 1001.0, "")
        assert db._ticket == durable_ticket
        db.wal.wait(durable_ticket)
        assert db.wal.synced >= durable_ticket
    finally:
        db.close()


def test_a_replaced_wal_file_is_reopened_not_a_stale_one_flushed(tmp_path: Path) -> None:
    path = tmp_path / "plain.db"
    wal = Path(f"{path}-wal")
    wal.write_bytes(b"first")
    sync = WalSync(path)
    try:
        sync.wait(sync.ticket())
        assert sync._fd is not None
        first = os.fstat(sync._fd).st_ino
        replacement = tmp_path / "replacement"
        replacement.write_bytes(b"second")
        os.replace(replacement, wal)
        sync.wait(sync.ticket())
        assert sync._fd is not None
        assert os.fstat(sync._fd).st_ino == os.stat(wal).st_ino != first
    finally:
        sync.close()


def test_a_queued_message_is_handed_on_only_once_on_disk(tmp_path: Path) -> None:
    db = QueueDB(tmp_path / "queue.db", 1000.0)
    try:
        handed: list[tuple[str, int, str]] = []

        async def queue_two() -> None:
            kept, dropped = _message(1), _message(2)
            db.enqueue(kept, {"corp.test": (["alice@corp.test"], [])}, 1000.0)
            SENDER.set("the session that queued it")  # the callback runs in this context
            db.when_flushed(lambda: handed.append((kept.id, db.wal.synced, SENDER.get())))
            ticket = db._ticket
            # Inside a transaction that rolls back: never handed on.
            try:
                with db.transaction():
                    db.enqueue(dropped, {"corp.test": (["alice@corp.test"], [])}, 1000.0)
                    db.when_flushed(lambda: handed.append((dropped.id, 0, "")))
                    raise RuntimeError("rolled back")
            except RuntimeError:
                pass
            assert handed == []  # not before the flush, even if it were instant
            await db.flushed()
            for _ in range(500):  # the flusher thread wakes the loop, which then calls back
                if handed:
                    break
                await asyncio.sleep(0.01)
            assert [h[0] for h in handed] == [kept.id]
            assert handed[0][1] >= ticket
            assert handed[0][2] == "the session that queued it"

        asyncio.run(queue_two())
        assert [m.id for m in db.messages()] == [handed[0][0]]
    finally:
        db.close()


def test_a_failed_transaction_is_rolled_back_and_the_next_one_commits(tmp_path: Path) -> None:
    """An error inside a transaction (a full disk, a bug) must not leave the connection
    inside it: later commits would then join it and never reach the file."""
    db = QueueDB(tmp_path / "queue.db", 1000.0)
    try:
        lost, kept = _message(1), _message(2)
        try:
            with db.transaction() as c:
                db.enqueue(lost, {"corp.test": (["alice@corp.test"], [])}, 1000.0)
                c.execute("SELECT no_such_column FROM messages")
        except sqlite3.OperationalError:
            pass
        assert not db.conn.in_transaction
        db.enqueue(kept, {"corp.test": (["alice@corp.test"], [])}, 1000.0)
        db.wal.wait(db._ticket)
        other = sqlite3.connect(tmp_path / "queue.db")
        assert other.execute("SELECT id FROM messages").fetchall() == [(kept.id,)]
        other.close()
    finally:
        db.close()


def test_a_fork_answered_in_part_remembers_whom_it_took_also_in_an_older_file(
    tmp_path: Path,
) -> None:
    """The next hop took bob and deferred alice: the fork keeps alice to do and bob as
    taken (the Safety Net keeps the message for him, SN-1) - also in a queue database
    written before the ``taken`` column existed, which is upgraded when it is opened."""
    path = tmp_path / "queue.db"
    db = QueueDB(path, 1000.0)
    message = _message(1)
    db.enqueue(
        message, {"corp.test": (["alice@corp.test", "bob@corp.test"], ["DB1", "DB2"])}, 1000.0
    )
    db.close()
    with sqlite3.connect(path) as old:  # the file as the code before the column wrote it
        old.execute("ALTER TABLE forks DROP COLUMN taken")
    db = QueueDB(path, 2000.0)
    try:
        [fork] = db.forks_of(message.id)
        assert fork.taken == []
        db.fork_narrow(fork, ["alice@corp.test"])
        [fork] = db.forks_of(message.id)
        assert (fork.recipients, fork.taken) == (["alice@corp.test"], ["bob@corp.test"])
    finally:
        db.close()
