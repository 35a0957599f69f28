"""Group commit for the queue database: one thread fsyncs the WAL for everyone.

SQLite in WAL mode appends each commit to the ``-wal`` file; with
``synchronous=FULL`` it then fsyncs that file inside COMMIT, which blocks the
event loop for a disk flush per message. Here the loop commits with
``synchronous=NORMAL`` (the frames reach the OS, not yet the disk) and a
durable commit takes a *ticket*; this module's thread runs ``fsync`` on the
WAL file and redeems every ticket issued before that fsync started. Commits
from concurrent sessions thus share one flush, and the loop keeps working
while the disk does. Whoever must not acknowledge before the data is on disk
awaits :meth:`WalSync.reached`; the guarantee is the same as FULL's (the
commit's frames, and everything before them, are on disk).

``fsync`` acts on the file, not on the descriptor, so a descriptor of our own
on the ``-wal`` file flushes what SQLite's connection wrote. SQLite keeps
that file (same inode) while a connection is open; if it were ever replaced,
the inode check below reopens it rather than flush a stale one.

The thread also runs the checkpoints (copying the WAL into the database file,
two more fsyncs) on a connection of its own, so that they never stall the
loop either; the loop's connection has auto-checkpointing off.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

#: seconds between checkpoints while commits keep coming
CHECKPOINT_INTERVAL = 1.0


class WalSync:
    """Tickets for durable commits, redeemed by a flusher thread."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.wal_path = Path(f"{db_path}-wal")
        self._lock = threading.Condition()
        self._issued = 0  # last ticket handed out
        self._synced = 0  # every ticket up to this one is on disk
        self._error: OSError | None = None
        self._closing = False
        self._fd: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._callbacks: list[tuple[int, Callable[[], None], contextvars.Context]] = []
        self._checkpointed_at = time.monotonic()
        self.flushes = 0  # fsyncs done (the group-commit ratio is tickets / flushes)
        self._thread = threading.Thread(target=self._run, name="wal-sync", daemon=True)
        self._thread.start()

    # -- the loop's side ----------------------------------------------------------------

    def ticket(self) -> int:
        """Call right after a durable commit: the ticket that commit's flush redeems."""
        with self._lock:
            self._issued += 1
            self._lock.notify()
            return self._issued

    @property
    def synced(self) -> int:
        with self._lock:
            return self._synced

    async def reached(self, ticket: int) -> None:
        """Return once ``ticket`` (and every earlier one) is on disk."""
        with self._lock:
            if self._error is not None:
                raise self._error
            if self._synced >= ticket:
                return
            self._loop = asyncio.get_running_loop()
            future = self._loop.create_future()
            self._waiters.append((ticket, future))
        await future

    def call_when_reached(self, ticket: int, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the event loop once ``ticket`` is on disk, after the
        tasks awaiting it have been woken (never, if the flush fails); in the
        caller's context, as ``loop.call_soon`` would."""
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        with self._lock:
            if self._error is not None:
                log.error("not running %r: the queue database could not be flushed", callback)
                return
            if self._synced < ticket:
                self._loop = loop
                self._callbacks.append((ticket, callback, context))
                return
        loop.call_soon(callback, context=context)

    def wait(self, ticket: int) -> None:
        """Blocking :meth:`reached`, for callers without an event loop."""
        with self._lock:
            while self._synced < ticket and self._error is None:
                self._lock.wait()
            if self._error is not None:
                raise self._error

    def close(self) -> None:
        """Flush what is outstanding, then stop the thread."""
        with self._lock:
            self._closing = True
            self._lock.notify()
        self._thread.join()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- the thread -----------------------------------------------------------------------

    def _run(self) -> None:
        checkpointer: sqlite3.Connection | None = None
        while True:
            with self._lock:
                while self._issued == self._synced and not self._closing:
                    self._lock.wait()
                if self._issued == self._synced:
                    break
                target = self._issued
            error = None
            try:
                self._fsync_wal()
            except OSError as exc:
                log.error("fsync of %s failed: %s", self.wal_path, exc)
                error = exc
            with self._lock:
                if error is not None:
                    self._error = error
                else:
                    self._synced = target
                    self.flushes += 1
                self._lock.notify_all()
                loop, due = self._loop, bool(self._waiters or self._callbacks)
            if loop is not None and due:
                # RuntimeError: the loop is closed, so nobody is waiting any more.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._wake_waiters)
            if error is None:
                checkpointer = self._maybe_checkpoint(checkpointer)
        if checkpointer is not None:
            checkpointer.close()

    def _fsync_wal(self) -> None:
        try:
            current = os.stat(self.wal_path).st_ino
        except FileNotFoundError:
            return  # no WAL: every commit is already in the database file
        if self._fd is not None and os.fstat(self._fd).st_ino != current:
            os.close(self._fd)
            self._fd = None
        if self._fd is None:
            self._fd = os.open(self.wal_path, os.O_RDONLY)
            if os.fstat(self._fd).st_ino != current:
                # Replaced between stat and open: flush the one we opened; SQLite
                # only replaces the WAL after it checkpointed (and synced) it.
                log.warning("%s was replaced while opening it", self.wal_path)
        os.fsync(self._fd)

    def _maybe_checkpoint(self, conn: sqlite3.Connection | None) -> sqlite3.Connection | None:
        now = time.monotonic()
        if now - self._checkpointed_at < CHECKPOINT_INTERVAL:
            return conn
        self._checkpointed_at = now
        try:
            if conn is None:
                conn = sqlite3.connect(self.db_path, isolation_level=None, timeout=5.0)
                conn.execute("PRAGMA synchronous=NORMAL")
            # PASSIVE: never waits for, nor blocks, the loop's readers and writer.
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:
            log.warning("checkpoint of %s failed: %s", self.db_path, exc)
        return conn

    def _wake_waiters(self) -> None:
        with self._lock:
            synced, error = self._synced, self._error
            due = [f for t, f in self._waiters if error is not None or t <= synced]
            self._waiters = [(t, f) for t, f in self._waiters if error is None and t > synced]
            calls = [(c, x) for t, c, x in self._callbacks if error is None and t <= synced]
            self._callbacks = [e for e in self._callbacks if error is None and e[0] > synced]
        for future in due:
            if future.done():
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(None)
        loop = asyncio.get_running_loop()
        for callback, context in calls:
            loop.call_soon(callback, context=context)  # after the tasks just woken
