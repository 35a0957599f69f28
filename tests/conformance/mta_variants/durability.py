"""Broken variants for durability: at volume (the workload scenarios of durability.yaml)
and across a power cut (power.yaml), where only what was fsynced survives."""

from __future__ import annotations

import dataclasses
from typing import Any

from . import Variant
from .promotion import _restart_forgets_pending_deliveries, _shadow_drops_copies


def _queue_in_memory_only() -> None:
    # Accepted messages live in memory only: a restarted node comes back with the same
    # queue database ID (so no shadow promotes) and none of the messages it held.
    from reference_impl.queue_db import QueueDB

    original = QueueDB.__init__

    def __init__(self: QueueDB, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        with self.transaction():
            for table in ("forks", "messages", "shadows"):
                self.conn.execute(f"DELETE FROM {table}")

    QueueDB.__init__ = __init__  # type: ignore[method-assign]


def _promotes_twice() -> None:
    # Every promoted shadow copy is queued twice, so each promotion delivers it two times.
    from reference_impl.queue_db import Message, new_id
    from reference_impl.shadowing import Shadowing

    original = Shadowing.promote

    def promote(self: Shadowing, *args: Any, **kwargs: Any) -> int:
        node = self.node
        enqueue = node.enqueue

        def twice(message: Message, plan: Any, **options: Any) -> None:
            enqueue(message, plan, **options)
            enqueue(dataclasses.replace(message, id=new_id()), plan, **options)

        node.enqueue = twice  # type: ignore[method-assign]
        try:
            return original(self, *args, **kwargs)
        finally:
            del node.enqueue

    Shadowing.promote = promote  # type: ignore[method-assign]


def _gives_up_on_transient_failure() -> None:
    # A delivery that fails for a while (next hop unreachable, 4xx) is counted as done:
    # the message leaves the queue, its shadow copy is discarded, nothing arrives.
    from reference_impl.delivery import Delivery
    from reference_impl.queue_db import Fork, Message

    def _retry(self: Delivery, message: Message, fork: Fork, error: str) -> None:
        self._finish_fork(message, fork, "delivered", "")

    Delivery._retry = _retry  # type: ignore[method-assign]


#: how long the broken variants' disk takes to flush: a power cut within it loses the write
SLOW_DISK_S = 1.5


def _slow_disk() -> None:
    # Every fsync of the queue's WAL first waits SLOW_DISK_S (and the checkpoints, which
    # also sync, come after it): what was not yet flushed is still in the page cache.
    import time

    from reference_impl.wal_sync import WalSync

    original = WalSync._fsync_wal

    def _fsync_wal(self: WalSync) -> None:
        time.sleep(SLOW_DISK_S)
        original(self)

    WalSync._fsync_wal = _fsync_wal  # type: ignore[method-assign]


def _acks_before_its_queue_is_synced() -> None:
    # The 250 no longer waits for the queue commit to reach the disk: a slow disk later
    # flushes it, and a power cut before that loses an acknowledged message.
    from reference_impl.wal_sync import WalSync

    _slow_disk()

    async def reached(self: WalSync, ticket: int) -> None:
        return None

    WalSync.reached = reached  # type: ignore[method-assign]


def _shadow_acks_an_unsynced_copy() -> None:
    # The shadow stores a copy (XSHADOW) as bookkeeping, not as a durable commit, and
    # answers 250 without waiting for the disk: nothing makes the copy durable before a
    # later durable commit of the shadow's own. The primary's queue stays durable.
    import contextlib
    import contextvars
    from collections.abc import Iterator

    from reference_impl.queue_db import QueueDB
    from reference_impl.shadowing import Shadowing

    storing = contextvars.ContextVar("storing_a_copy", default=False)
    skip_flush = contextvars.ContextVar("skip_flush", default=False)
    store_copy = Shadowing.store_copy
    transaction = QueueDB.transaction
    flushed = QueueDB.flushed

    def store(self: Shadowing, *args: Any, **kwargs: Any) -> Any:
        token = storing.set(True)
        try:
            return store_copy(self, *args, **kwargs)
        finally:
            storing.reset(token)
            skip_flush.set(True)  # the handler awaits flushed() next, in this same task

    @contextlib.contextmanager
    def not_durable_while_storing(self: QueueDB, durable: bool = True) -> Iterator[Any]:
        with transaction(self, durable=durable and not storing.get()) as conn:
            yield conn

    async def flushed_unless_a_copy(self: QueueDB) -> None:
        if skip_flush.get():
            skip_flush.set(False)
            return
        await flushed(self)

    Shadowing.store_copy = store  # type: ignore[method-assign]
    QueueDB.transaction = not_durable_while_storing  # type: ignore[method-assign,assignment]
    QueueDB.flushed = flushed_unless_a_copy  # type: ignore[method-assign]


def _acknowledges_what_it_could_not_store() -> None:
    # A write the queue refuses (disk full, I/O error) is swallowed and the message (or
    # the shadow copy) acknowledged with 250 all the same.
    import sqlite3

    from reference_impl.smtp_in import NodeHandler

    data = NodeHandler._data

    async def handle_DATA(self: NodeHandler, *args: Any) -> str:
        try:
            return await data(self, *args)
        except (sqlite3.Error, OSError):
            return "250 2.0.0 Ok: queued"

    NodeHandler.handle_DATA = handle_DATA  # type: ignore[method-assign]


VARIANTS: list[Variant] = [
    Variant(
        name="acknowledges-what-it-could-not-store",
        breaks="a message (or shadow copy) the queue could not store because the disk is "
        "full is acknowledged with 250 all the same",
        fails=(
            "pr3_full_disk_refuses_and_keeps_what_it_acknowledged",
            "cr4_shadow_with_a_full_disk_makes_no_copy",
            "durability_disk_faults",
        ),
        apply=_acknowledges_what_it_could_not_store,
    ),
    Variant(
        name="acks-before-its-queue-is-synced",
        breaks="the node answers 250 once the message is written to its queue, before the "
        "write is on disk (which a slow disk makes it 1.5 s later): a power cut in between "
        "loses an acknowledged message",
        fails=(
            "pr3_power_cut_after_the_250_keeps_the_message",
            "durability_single_node_power_cut",
        ),
        apply=_acks_before_its_queue_is_synced,
    ),
    Variant(
        name="shadow-acks-an-unsynced-copy",
        breaks="the shadow answers 250 to a copy before it is on its disk: a shadow that "
        "loses power right after has no copy to promote",
        fails=("cr1_shadow_power_cut_after_its_250_keeps_the_copy",),
        apply=_shadow_acks_an_unsynced_copy,
    ),
    Variant(
        name="queue-in-memory-only",
        breaks="accepted messages are kept in memory only: a node killed and restarted on "
        "its queue database has forgotten every message it had not delivered",
        fails=("durability_single_node_kill_restart",),
        apply=_queue_in_memory_only,
    ),
    Variant(
        name="promotes-copies-twice",
        breaks="a shadow promoting its copies resubmits each of them twice",
        fails=("durability_wipe", "durability_kill", "durability_pause", "durability_mixed"),
        apply=_promotes_twice,
    ),
    Variant(
        name="shadow-drops-copies-at-volume",
        breaks="the shadow acknowledges every copy but stores none of them (at volume: two "
        "nodes failing together is judged only when the shadow held its copy)",
        fails=("durability_two_nodes_fail_together",),
        apply=_shadow_drops_copies,
    ),
    Variant(
        name="gives-up-on-transient-failure",
        breaks="a delivery that fails for a while (next hop unreachable) counts as done: the "
        "message and its shadow copy are dropped",
        fails=("durability_link_faults",),
        apply=_gives_up_on_transient_failure,
    ),
    Variant(
        name="restart-forgets-pending-at-volume",
        breaks="a node restarted on its queue database never resumes the deliveries pending "
        "in it (at volume)",
        fails=("durability_restart",),
        apply=_restart_forgets_pending_deliveries,
    ),
]
