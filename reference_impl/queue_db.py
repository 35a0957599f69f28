"""The queue database: one SQLite file per node, durable before any 250.

Every commit runs on the event loop in WAL mode with ``synchronous=NORMAL``:
its frames reach the operating system at once (a process that dies loses
nothing) but not yet the disk. A *durable* commit (a queued message, a stored
shadow copy) also takes a ticket from :class:`~.wal_sync.WalSync`, whose
thread fsyncs the WAL for all the tickets issued meanwhile (group commit);
the SMTP layer awaits :meth:`QueueDB.flushed` before its 250, so a message is
on disk, as with ``synchronous=FULL``, before it is acknowledged, while the
loop never waits for the disk. Later bookkeeping (delivery progress, discard
hand-outs, peer contact) takes no ticket: the next flush carries it (one is
taken every BOOKKEEPING_PER_FLUSH commits, so that the WAL is also flushed
and checkpointed when nothing durable happens); only a power cut can undo
it, which at worst delivers a message twice, never loses it.

The file also carries the queue database ID: a node restarted on the same
file keeps it, a wiped node gets a new one, and shadows compare it to
detect a primary that lost its queue (PR-2).

Tables:
- ``messages`` + ``forks``: the active queue; a message has one fork per
  next hop (CR-10), each delivered or failed on its own.
- ``shadows``: copies this node keeps for other nodes (its shadow queues).
- ``safety_net``: processed messages kept for resubmission (kind primary or shadow).
- ``discard_events``: for each shadow, the messages it may drop (DI-1, DI-5).
- ``peers``: the last contact with each primary this node shadows for.
- ``resubmit_requests``: Safety Net requests this node coordinates (SN-5, SN-7).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .wal_sync import WalSync

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS messages (
    id TEXT PRIMARY KEY,
    message_id TEXT,
    sender TEXT NOT NULL,
    recipients TEXT NOT NULL,
    content BLOB NOT NULL,
    received_at REAL NOT NULL,
    origin TEXT NOT NULL,
    shadow_node TEXT,
    shadow_hop TEXT,
    no_dsn INTEGER NOT NULL DEFAULT 0,
    parent TEXT,
    keep_in_safety_net INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS forks (
    message TEXT NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    domain TEXT NOT NULL,
    recipients TEXT NOT NULL,
    databases TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt REAL NOT NULL,
    last_error TEXT,
    done_at REAL,
    taken TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (message, domain)
);
CREATE INDEX IF NOT EXISTS forks_pending ON forks(state, next_attempt);
CREATE TABLE IF NOT EXISTS shadows (
    id TEXT PRIMARY KEY,
    primary_node TEXT NOT NULL,
    primary_db_id TEXT NOT NULL,
    primary_msg TEXT NOT NULL,
    message_id TEXT,
    sender TEXT NOT NULL,
    recipients TEXT NOT NULL,
    next_hops TEXT NOT NULL,
    content BLOB NOT NULL,
    received_at REAL NOT NULL,
    state TEXT NOT NULL,
    UNIQUE (primary_node, primary_msg)
);
CREATE TABLE IF NOT EXISTS safety_net (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    message_id TEXT,
    primary_node TEXT NOT NULL,
    primary_db_id TEXT NOT NULL,
    sender TEXT NOT NULL,
    recipients TEXT NOT NULL,
    databases TEXT NOT NULL,
    content BLOB NOT NULL,
    processed_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    crossed_boundary INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS safety_net_time ON safety_net(kind, processed_at);
CREATE TABLE IF NOT EXISTS discard_events (
    shadow_node TEXT NOT NULL,
    message TEXT NOT NULL,
    message_id TEXT,
    created_at REAL NOT NULL,
    handed_out_at REAL,
    PRIMARY KEY (shadow_node, message)
);
CREATE TABLE IF NOT EXISTS peers (
    node TEXT PRIMARY KEY,
    last_contact REAL NOT NULL,
    db_id TEXT,
    failures INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS resubmit_requests (
    id TEXT PRIMARY KEY,
    database TEXT NOT NULL,
    start REAL NOT NULL,
    end REAL NOT NULL,
    created_at REAL NOT NULL,
    state TEXT NOT NULL,
    waiting TEXT NOT NULL,
    log TEXT NOT NULL
);
"""


#: commits without a ticket after which one is taken anyway
BOOKKEEPING_PER_FLUSH = 64


def new_id() -> str:
    return uuid.uuid4().hex


@dataclass
class Fork:
    message: str
    domain: str
    recipients: list[str]
    databases: list[str]
    state: str
    attempts: int
    next_attempt: float
    #: recipients the next hop took on an earlier attempt that it answered in part
    #: (``recipients`` are the ones still to do): they are delivered, so Safety Net keeps them
    taken: list[str] = field(default_factory=list)


@dataclass
class Message:
    id: str
    message_id: str | None
    sender: str
    recipients: list[str]
    content: bytes
    received_at: float
    origin: str
    shadow_node: str | None = None  # 2013: the node holding this message's copy
    shadow_hop: str | None = None  # XSHADOW handshake: the sending hop keeps the copy
    no_dsn: bool = False  # resubmissions and DSNs never produce DSNs
    parent: str | None = None  # a DSN's original message
    keep_in_safety_net: bool = True


class QueueDB:
    """All durable state of one node. Methods are synchronous and commit at once."""

    def __init__(self, path: Path, now: float) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.row_factory = sqlite3.Row
        # Small pages (for a new file): a queued message touches some ten
        # b-tree pages per commit, each copied whole into the WAL and fsynced.
        self.conn.execute("PRAGMA page_size=1024")
        self.conn.execute("PRAGMA journal_mode=WAL")
        # The fsyncs and checkpoints happen in WalSync's thread (module doc).
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA wal_autocheckpoint=0")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.conn.executescript(SCHEMA)
        _add_missing_columns(self.conn)
        self.wal = WalSync(path)
        self._ticket = 0
        self._durable_inside = False
        self._undurable = 0  # commits since the last ticket
        self._after_flush: list[Callable[[], None]] = []
        with self.transaction():
            if self.meta("queue_db_id") is None:
                self.set_meta("queue_db_id", new_id())
                self.set_meta("created_at", repr(now))
        self.wal.wait(self._ticket)
        # Fixed for the life of the file (a wiped node gets a new file, so a new ID).
        self._db_id = self.meta("queue_db_id")

    def close(self) -> None:
        self.wal.close()
        self.conn.close()

    @contextmanager
    def transaction(self, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction; a durable one is on disk once :meth:`flushed` returns.

        Inside another transaction it joins that one (one commit for both; an
        exception rolls back both, so do not swallow one inside)."""
        if self.conn.in_transaction:
            self._durable_inside = self._durable_inside or durable
            yield self.conn
            return
        self.conn.execute("BEGIN IMMEDIATE")
        self._durable_inside = durable
        try:
            yield self.conn
        except BaseException:
            # SQLite has already rolled back on some errors (I/O, full disk):
            # a second ROLLBACK would hide the error that matters.
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            self._after_flush.clear()
            raise
        self.conn.execute("COMMIT")
        if not self._durable_inside:
            self._undurable += 1
        if self._durable_inside or self._undurable >= BOOKKEEPING_PER_FLUSH:
            # (A run of bookkeeping alone is flushed, and checkpointed, now and then too.)
            self._ticket = self.wal.ticket()
            self._undurable = 0
        for callback in self._after_flush:
            self.wal.call_when_reached(self._ticket, callback)
        self._after_flush.clear()

    async def flushed(self) -> None:
        """Return once every durable commit made so far is on disk (before a 250)."""
        await self.wal.reached(self._ticket)

    def when_flushed(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the event loop) once the last durable commit is on
        disk; inside a transaction, once that transaction is (never if it rolls back)."""
        if self.conn.in_transaction:
            self._after_flush.append(callback)
        else:
            self.wal.call_when_reached(self._ticket, callback)

    def _bookkeeping(self, sql: str, args: tuple[Any, ...]) -> int:
        """One non-durable write statement; the number of rows it touched."""
        with self.transaction(durable=False) as c:
            return c.execute(sql, args).rowcount

    # -- meta ---------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    @property
    def db_id(self) -> str:
        assert self._db_id is not None
        return self._db_id

    @property
    def created_at(self) -> float:
        return float(self.meta("created_at") or 0.0)

    # -- active queue -------------------------------------------------------

    def enqueue(
        self,
        message: Message,
        forks: dict[str, tuple[list[str], list[str]]],
        now: float,
    ) -> None:
        """Queue a message with one fork per next-hop domain: (recipients, databases)."""
        with self.transaction() as c:
            c.execute(
                "INSERT INTO messages VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    message.id,
                    message.message_id,
                    message.sender,
                    json.dumps(message.recipients),
                    message.content,
                    message.received_at,
                    message.origin,
                    message.shadow_node,
                    message.shadow_hop,
                    int(message.no_dsn),
                    message.parent,
                    int(message.keep_in_safety_net),
                ),
            )
            c.executemany(
                "INSERT INTO forks(message, domain, recipients, databases, state, next_attempt) "
                "VALUES (?, ?, ?, ?, 'pending', ?)",
                [
                    (message.id, domain, json.dumps(rcpts), json.dumps(dbs), now)
                    for domain, (rcpts, dbs) in forks.items()
                ],
            )

    def message(self, message_id: str) -> Message | None:
        row = self.conn.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
        return None if row is None else _message(row)

    def messages(self) -> list[Message]:
        rows = self.conn.execute("SELECT * FROM messages ORDER BY received_at").fetchall()
        return [_message(r) for r in rows]

    def forks_of(self, message_id: str) -> list[Fork]:
        rows = self.conn.execute(
            "SELECT * FROM forks WHERE message = ? ORDER BY domain", (message_id,)
        ).fetchall()
        return [_fork(r) for r in rows]

    def pending_forks(self) -> list[Fork]:
        rows = self.conn.execute(
            "SELECT * FROM forks WHERE state = 'pending' ORDER BY next_attempt"
        ).fetchall()
        return [_fork(r) for r in rows]

    def fork_done(self, message_id: str, domain: str, state: str, now: float, error: str) -> None:
        self._bookkeeping(
            "UPDATE forks SET state = ?, done_at = ?, last_error = ?, attempts = attempts + 1 "
            "WHERE message = ? AND domain = ?",
            (state, now, error, message_id, domain),
        )

    def fork_narrow(self, fork: Fork, recipients: list[str]) -> None:
        """Only ``recipients`` of the fork are still to be done: the next hop took the
        others (a retry must not give them a second copy, a DSN must not name them, and
        the Safety Net keeps the message for them: SN-1)."""
        taken = [*fork.taken, *(r for r in fork.recipients if r not in recipients)]
        self._bookkeeping(
            "UPDATE forks SET recipients = ?, taken = ? WHERE message = ? AND domain = ?",
            (json.dumps(recipients), json.dumps(taken), fork.message, fork.domain),
        )

    def fork_retry(self, message_id: str, domain: str, next_attempt: float, error: str) -> None:
        self._bookkeeping(
            "UPDATE forks SET attempts = attempts + 1, next_attempt = ?, last_error = ? "
            "WHERE message = ? AND domain = ?",
            (next_attempt, error, message_id, domain),
        )

    def children(self, message_id: str) -> int:
        row = self.conn.execute(
            "SELECT COUNT(*) FROM messages WHERE parent = ?", (message_id,)
        ).fetchone()
        return int(row[0])

    def retire(
        self,
        message: Message,
        discard_for: Iterable[str],
        safety_net: list[dict[str, Any]],
        now: float,
    ) -> None:
        """A fully processed message leaves the active queue in one transaction:
        discard events for its shadows (DI-1) and its Primary Safety Net entries (SN-1)."""
        with self.transaction(durable=False) as c:
            for node in discard_for:
                c.execute(
                    "INSERT OR IGNORE INTO discard_events VALUES (?, ?, ?, ?, NULL)",
                    (node, message.id, message.message_id, now),
                )
            for entry in safety_net:
                self._insert_safety_net(c, entry)
            c.execute("DELETE FROM messages WHERE id = ?", (message.id,))

    # -- shadow queues ------------------------------------------------------

    def add_shadow(self, entry: dict[str, Any]) -> bool:
        """Store a copy kept for another node; False if it was already here."""
        with self.transaction() as c:
            cursor = c.execute(
                "INSERT OR IGNORE INTO shadows VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    entry.get("id") or new_id(),
                    entry["primary_node"],
                    entry["primary_db_id"],
                    entry["primary_msg"],
                    entry.get("message_id"),
                    entry["sender"],
                    json.dumps(entry["recipients"]),
                    json.dumps(entry["next_hops"]),
                    entry["content"],
                    entry["received_at"],
                    entry.get("state", "shadow"),
                ),
            )
            c.execute(
                "INSERT INTO peers(node, last_contact, db_id) VALUES (?, ?, ?) "
                "ON CONFLICT(node) DO UPDATE SET last_contact = excluded.last_contact, "
                "db_id = excluded.db_id, failures = 0",
                (entry["primary_node"], entry["received_at"], entry["primary_db_id"]),
            )
            return cursor.rowcount == 1

    def shadows(self, primary: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM shadows"
        args: tuple[Any, ...] = ()
        if primary is not None:
            sql += " WHERE primary_node = ?"
            args = (primary,)
        rows = self.conn.execute(sql + " ORDER BY received_at", args).fetchall()
        return [_shadow(r) for r in rows]

    def oldest_shadow_arrival(self, primary: str) -> float | None:
        row = self.conn.execute(
            "SELECT MIN(received_at) FROM shadows WHERE primary_node = ?", (primary,)
        ).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def has_shadows(self, primary: str) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM shadows WHERE primary_node = ? LIMIT 1", (primary,)
        ).fetchone()
        return row is not None

    def stale_shadows(self, primary: str, db_id: str) -> list[dict[str, Any]]:
        """Copies taken from an earlier queue database of ``primary`` (PR-2)."""
        rows = self.conn.execute(
            "SELECT * FROM shadows WHERE primary_node = ? AND primary_db_id != ?",
            (primary, db_id),
        ).fetchall()
        return [_shadow(r) for r in rows]

    def shadow_primaries(self, older_than: float | None = None) -> list[str]:
        """The primaries this node holds shadow copies of (received by ``older_than``)."""
        if older_than is None:
            rows = self.conn.execute("SELECT DISTINCT primary_node FROM shadows").fetchall()
        else:
            rows = self.conn.execute(
                "SELECT DISTINCT primary_node FROM shadows WHERE received_at <= ?", (older_than,)
            ).fetchall()
        return [str(r[0]) for r in rows]

    def remove_shadow(self, shadow_id: str) -> bool:
        """Whether this call removed it (another session or SMTP-in worker of the node
        may have removed it first)."""
        return self._bookkeeping("DELETE FROM shadows WHERE id = ?", (shadow_id,)) > 0

    def set_shadow_state(self, shadow_id: str, state: str) -> None:
        self._bookkeeping("UPDATE shadows SET state = ? WHERE id = ?", (state, shadow_id))

    def shadow_to_safety_net(self, primary: str, primary_msgs: list[str], entry_for: Any) -> int:
        """DI-4/SN-2: move discarded shadows to the Shadow Safety Net (or drop them
        when ``entry_for`` returns None, as a 2010 node does). Returns how many moved."""
        moved = 0
        with self.transaction(durable=False) as c:
            for msg in primary_msgs:
                row = c.execute(
                    "SELECT * FROM shadows WHERE primary_node = ? AND primary_msg = ?",
                    (primary, msg),
                ).fetchone()
                if row is None:
                    continue
                entry = entry_for(_shadow(row))
                if entry is not None:
                    self._insert_safety_net(c, entry)
                c.execute("DELETE FROM shadows WHERE id = ?", (row["id"],))
                moved += 1
        return moved

    # -- peers (primaries this node shadows for) ----------------------------

    def peer(self, node: str) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT * FROM peers WHERE node = ?", (node,)).fetchone()
        return None if row is None else dict(row)

    def peer_contact(self, node: str, now: float, db_id: str | None) -> None:
        self._bookkeeping(
            "INSERT INTO peers(node, last_contact, db_id) VALUES (?, ?, ?) "
            "ON CONFLICT(node) DO UPDATE SET last_contact = excluded.last_contact, "
            "db_id = COALESCE(excluded.db_id, peers.db_id), failures = 0",
            (node, now, db_id),
        )

    def peer_failure(self, node: str) -> int:
        self._bookkeeping("UPDATE peers SET failures = failures + 1 WHERE node = ?", (node,))
        peer = self.peer(node)
        return 0 if peer is None else int(peer["failures"])

    # -- discard events (primary side) --------------------------------------

    def take_discards(self, shadow_node: str, now: float, limit: int = 1000) -> list[str]:
        """DI-3: the notifications for one shadow that it has not confirmed yet, oldest
        first. Reading marks nothing: a notification counts as handed over once the
        shadow confirms it acted on it (:meth:`confirm_discards`), so a lost reply
        costs a repetition, never an orphaned shadow copy."""
        rows = self.conn.execute(
            "SELECT message FROM discard_events WHERE shadow_node = ? AND handed_out_at IS NULL "
            "ORDER BY created_at, rowid LIMIT ?",
            (shadow_node, limit),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def confirm_discards(self, shadow_node: str, messages: list[str], now: float) -> None:
        """The shadow acted on these notifications: handed over, never offered again."""
        if not messages:
            return
        with self.transaction(durable=False) as c:
            c.executemany(
                "UPDATE discard_events SET handed_out_at = ? "
                "WHERE shadow_node = ? AND message = ? AND handed_out_at IS NULL",
                [(now, shadow_node, m) for m in messages],
            )

    def discard_events(self) -> list[dict[str, Any]]:
        rows = self.conn.execute("SELECT * FROM discard_events ORDER BY created_at").fetchall()
        return [dict(r) for r in rows]

    def expire_discards(self, older_than: float) -> int:
        """DI-6: drop events no shadow asked for in time (handed-out ones are history)."""
        return self._bookkeeping("DELETE FROM discard_events WHERE created_at <= ?", (older_than,))

    # -- Safety Net ---------------------------------------------------------

    def _insert_safety_net(self, c: sqlite3.Connection, entry: dict[str, Any]) -> None:
        c.execute(
            "INSERT INTO safety_net VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                new_id(),
                entry["kind"],
                entry.get("message_id"),
                entry["primary_node"],
                entry["primary_db_id"],
                entry["sender"],
                json.dumps(entry["recipients"]),
                json.dumps(entry["databases"]),
                entry["content"],
                entry["processed_at"],
                entry["expires_at"],
                int(entry.get("crossed_boundary", False)),
            ),
        )

    def safety_net(
        self,
        kind: str,
        start: float | None = None,
        end: float | None = None,
        primary: str | None = None,
    ) -> list[dict[str, Any]]:
        sql = "SELECT * FROM safety_net WHERE kind = ?"
        args: list[Any] = [kind]
        if start is not None:
            sql += " AND processed_at >= ?"
            args.append(start)
        if end is not None:
            sql += " AND processed_at < ?"
            args.append(end)
        if primary is not None:
            sql += " AND primary_node = ?"
            args.append(primary)
        rows = self.conn.execute(sql + " ORDER BY processed_at", args).fetchall()
        return [_safety_net(r) for r in rows]

    def expire_safety_net(self, now: float) -> int:
        return self._bookkeeping("DELETE FROM safety_net WHERE expires_at <= ?", (now,))

    def expire_shadows(self, older_than: float) -> int:
        """SN-4: a shadow never acknowledged is dropped after hold time + expiration."""
        return self._bookkeeping("DELETE FROM shadows WHERE received_at <= ?", (older_than,))

    # -- Safety Net resubmission requests -----------------------------------

    def save_request(self, request: dict[str, Any]) -> None:
        self._bookkeeping(
            "INSERT INTO resubmit_requests VALUES (?,?,?,?,?,?,?,?) "
            "ON CONFLICT(id) DO UPDATE SET state = excluded.state, waiting = excluded.waiting, "
            "log = excluded.log",
            (
                request["request_id"],
                request["database"],
                request["start"],
                request["end"],
                request["created_at"],
                request["state"],
                json.dumps(request["waiting"]),
                json.dumps(request["log"]),
            ),
        )

    def requests(self) -> list[dict[str, Any]]:
        rows = self.conn.execute("SELECT * FROM resubmit_requests ORDER BY created_at").fetchall()
        return [
            {
                "request_id": r["id"],
                "database": r["database"],
                "start": r["start"],
                "end": r["end"],
                "created_at": r["created_at"],
                "state": r["state"],
                "waiting": json.loads(r["waiting"]),
                "log": json.loads(r["log"]),
            }
            for r in rows
        ]


def _message(row: sqlite3.Row) -> Message:
    return Message(
        id=row["id"],
        message_id=row["message_id"],
        sender=row["sender"],
        recipients=json.loads(row["recipients"]),
        content=bytes(row["content"]),
        received_at=row["received_at"],
        origin=row["origin"],
        shadow_node=row["shadow_node"],
        shadow_hop=row["shadow_hop"],
        no_dsn=bool(row["no_dsn"]),
        parent=row["parent"],
        keep_in_safety_net=bool(row["keep_in_safety_net"]),
    )


def _fork(row: sqlite3.Row) -> Fork:
    return Fork(
        message=row["message"],
        domain=row["domain"],
        recipients=json.loads(row["recipients"]),
        databases=json.loads(row["databases"]),
        state=row["state"],
        attempts=row["attempts"],
        next_attempt=row["next_attempt"],
        taken=json.loads(row["taken"]),
    )


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    """A queue database written before a column existed gets it (empty), so that a node
    upgraded in place keeps its queue."""
    have = {row["name"] for row in conn.execute("PRAGMA table_info(forks)")}
    if "taken" not in have:
        conn.execute("ALTER TABLE forks ADD COLUMN taken TEXT NOT NULL DEFAULT '[]'")


def _shadow(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    out["recipients"] = json.loads(out["recipients"])
    out["next_hops"] = json.loads(out["next_hops"])
    out["content"] = bytes(out["content"])
    return out


def _safety_net(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    out["recipients"] = json.loads(out["recipients"])
    out["databases"] = json.loads(out["databases"])
    out["content"] = bytes(out["content"])
    out["crossed_boundary"] = bool(out["crossed_boundary"])
    return out
