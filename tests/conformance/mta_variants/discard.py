"""Broken variants for discarding shadow copies (DI-1 .. DI-7)."""

from __future__ import annotations

import contextvars
from typing import Any

from . import Variant


def _never_queries_discards() -> None:
    # Sessions to the primary go on (the queue database ID is still read from
    # EHLO), but XQDISCARD is never sent.
    from reference_impl.peer_link import PeerLink

    async def query_discards(self: PeerLink) -> list[str]:
        if self.on_discards is not None and self.advert is not None:
            await self.on_discards(self.peer, self.advert.db_id, [])
        return []

    PeerLink.query_discards = query_discards  # type: ignore[method-assign]


def _queries_only_in_heartbeats() -> None:
    # XQDISCARD only in the sessions opened for the purpose, not in the others
    # (a heartbeat runs in its own task, so a context variable tells them apart).
    from reference_impl.peer_link import PeerLink
    from reference_impl.shadowing import Shadowing

    in_heartbeat: contextvars.ContextVar[bool] = contextvars.ContextVar("heartbeat", default=False)
    original_open = PeerLink.open
    original_heartbeat = Shadowing.heartbeat

    async def heartbeat(self: Shadowing, primary: str) -> None:
        token = in_heartbeat.set(True)
        try:
            await original_heartbeat(self, primary)
        finally:
            in_heartbeat.reset(token)

    async def open_link(self: PeerLink) -> None:
        if in_heartbeat.get():
            await original_open(self)
            return

        async def no_query() -> list[str]:
            if self.on_discards is not None and self.advert is not None:
                await self.on_discards(self.peer, self.advert.db_id, [])
            return []

        setattr(self, "query_discards", no_query)  # noqa: B010 - shadows the method
        try:
            await original_open(self)
        finally:
            delattr(self, "query_discards")

    PeerLink.open = open_link  # type: ignore[method-assign]
    Shadowing.heartbeat = heartbeat  # type: ignore[method-assign]


def _heartbeats_too_rarely() -> None:
    # The heartbeat comes every two ShadowHeartbeatFrequency periods, not every one.
    from reference_impl.shadowing import Shadowing

    async def heartbeat_loop(self: Shadowing, primary: str) -> None:
        while self.node.db.has_shadows(primary):
            await self.node.clock.sleep(2 * self.node.settings.ShadowHeartbeatFrequency)
            await self.heartbeat(primary)

    Shadowing._heartbeat_loop = heartbeat_loop  # type: ignore[method-assign]


def _heartbeat_frequency_read_once() -> None:
    # The heartbeat loop reads ShadowHeartbeatFrequency when it starts: an admin's
    # change takes effect only after a whole beat of the old value.
    from reference_impl.shadowing import Shadowing

    async def heartbeat_loop(self: Shadowing, primary: str) -> None:
        frequency = self.node.settings.ShadowHeartbeatFrequency
        while self.node.db.has_shadows(primary):
            await self.node.clock.sleep(frequency)
            await self.heartbeat(primary)

    Shadowing._heartbeat_loop = heartbeat_loop  # type: ignore[method-assign]


def _records_discard_on_receipt() -> None:
    # The discard status is written as soon as the message is queued, before
    # any next hop has acknowledged it.
    from reference_impl.node import Node

    original = Node.enqueue

    def enqueue(self: Node, message: Any, plan: Any, *, categorise: bool = True) -> None:
        original(self, message, plan, categorise=categorise)
        now = self.clock.now()
        with self.db.transaction() as c:
            for shadow in (message.shadow_node, message.shadow_hop):
                if shadow:
                    c.execute(
                        "INSERT OR IGNORE INTO discard_events VALUES (?, ?, ?, ?, NULL)",
                        (shadow, message.id, message.message_id, now),
                    )

    Node.enqueue = enqueue  # type: ignore[method-assign]


def _shadow_deletes_discarded_copies() -> None:
    # A 2013 shadow drops a discarded copy instead of keeping it in its Shadow Safety Net.
    from reference_impl.shadowing import Shadowing

    def safety_net_entry(self: Shadowing, shadow: dict[str, Any]) -> None:
        return None

    Shadowing._safety_net_entry = safety_net_entry  # type: ignore[method-assign]


def _heartbeats_stop_after_a_notification() -> None:
    # Once a primary's notification arrived, the shadow stops asking it, although it still
    # holds copies from it (DI-2).
    from reference_impl.shadowing import Shadowing

    original_on, original_beat = Shadowing.on_discards, Shadowing.heartbeat
    told: set[str] = set()

    async def on_discards(self: Shadowing, primary: str, db_id: str | None, ids: list[str]) -> None:
        if ids:
            told.add(primary)
        await original_on(self, primary, db_id, ids)

    async def heartbeat(self: Shadowing, primary: str) -> None:
        if primary not in told:
            await original_beat(self, primary)

    Shadowing.on_discards = on_discards  # type: ignore[method-assign]
    Shadowing.heartbeat = heartbeat  # type: ignore[method-assign]


def _shadow_ignores_notifications() -> None:
    # The shadow reads the discard notifications and does nothing with them: its copy
    # stays in the shadow queue, to be promoted once the primary is gone (DI-4).
    from reference_impl.shadowing import Shadowing

    original = Shadowing.on_discards

    async def on_discards(self: Shadowing, primary: str, db_id: str | None, ids: list[str]) -> None:
        await original(self, primary, db_id, [])

    Shadowing.on_discards = on_discards  # type: ignore[method-assign]


def _hands_out_every_notification() -> None:
    # XQDISCARD answers with the pending notifications of every shadow, not only the querier's.
    from reference_impl.queue_db import QueueDB

    def take_discards(self: QueueDB, shadow_node: str, now: float, limit: int = 1000) -> list[str]:
        with self.transaction(durable=False) as c:
            rows = c.execute(
                "SELECT message FROM discard_events WHERE handed_out_at IS NULL "
                "ORDER BY created_at LIMIT ?",
                (limit,),
            ).fetchall()
            ids = [str(r[0]) for r in rows]
            c.executemany(
                "UPDATE discard_events SET handed_out_at = ? WHERE message = ?",
                [(now, m) for m in ids],
            )
        return ids

    QueueDB.take_discards = take_discards  # type: ignore[method-assign]


def _hands_notifications_out_again() -> None:
    # XQDISCARD answers with the querier's notifications, old ones included: nothing
    # is ever marked as handed over.
    from reference_impl.queue_db import QueueDB

    def take_discards(self: QueueDB, shadow_node: str, now: float, limit: int = 1000) -> list[str]:
        rows = self.conn.execute(
            "SELECT message FROM discard_events WHERE shadow_node = ? ORDER BY created_at LIMIT ?",
            (shadow_node, limit),
        ).fetchall()
        return [str(r[0]) for r in rows]

    QueueDB.take_discards = take_discards  # type: ignore[method-assign]


def _forgets_discards_on_restart() -> None:
    # Discard notifications do not outlive the process.
    from reference_impl.queue_db import QueueDB

    original = QueueDB.__init__

    def __init__(self: QueueDB, path: Any, now: float) -> None:
        original(self, path, now)
        with self.transaction() as c:
            c.execute("DELETE FROM discard_events")

    QueueDB.__init__ = __init__  # type: ignore[method-assign]


def _discard_events_never_expire() -> None:
    from reference_impl.queue_db import QueueDB

    def expire_discards(self: QueueDB, older_than: float) -> int:
        return 0

    QueueDB.expire_discards = expire_discards  # type: ignore[method-assign]


def _discard_events_expire_a_minute_early() -> None:
    # ShadowMessageAutoDiscardInterval one minute short (DI-6 at its edge).
    from reference_impl.queue_db import QueueDB

    original = QueueDB.expire_discards

    def expire_discards(self: QueueDB, older_than: float) -> int:
        return original(self, older_than + 60)

    QueueDB.expire_discards = expire_discards  # type: ignore[method-assign]


def _discards_sender_shadow_on_receipt() -> None:
    # Multi-hop: the sending hop is told to discard as soon as this node has the
    # message, before this node has relayed it onward.
    from reference_impl.node import Node

    original = Node.enqueue

    def enqueue(self: Node, message: Any, plan: Any, *, categorise: bool = True) -> None:
        original(self, message, plan, categorise=categorise)
        if message.shadow_hop:
            with self.db.transaction() as c:
                c.execute(
                    "INSERT OR IGNORE INTO discard_events VALUES (?, ?, ?, ?, NULL)",
                    (message.shadow_hop, message.id, message.message_id, self.clock.now()),
                )

    Node.enqueue = enqueue  # type: ignore[method-assign]


def _unknown_copy_stops_the_discard_batch() -> None:
    # A notification for a copy the shadow no longer holds ends the batch: the later
    # notifications were taken from the primary but their copies stay shadows (DI-4).
    from reference_impl.queue_db import QueueDB

    original = QueueDB.shadow_to_safety_net

    def shadow_to_safety_net(
        self: QueueDB, primary: str, primary_msgs: list[str], entry_for: Any
    ) -> int:
        held = []
        for msg in primary_msgs:
            row = self.conn.execute(
                "SELECT 1 FROM shadows WHERE primary_node = ? AND primary_msg = ?",
                (primary, msg),
            ).fetchone()
            if row is None:
                break
            held.append(msg)
        return original(self, primary, held, entry_for)

    QueueDB.shadow_to_safety_net = shadow_to_safety_net  # type: ignore[method-assign]


VARIANTS: list[Variant] = [
    Variant(
        name="never-queries-discards",
        breaks="a shadow never sends XQDISCARD, so it never learns a copy may go",
        fails=(
            "di1_di4_discard_once_next_hop_acknowledged",
            "di2_discard_query_in_every_session",
            "di2_heartbeat_within_shadow_heartbeat_frequency",
            "di3_notifications_only_for_the_querying_shadow",
            "di5_discard_status_survives_primary_restart",
        ),
        apply=_never_queries_discards,
    ),
    Variant(
        name="queries-discards-only-in-heartbeats",
        breaks="a shadow asks for discard status in its heartbeat sessions only, "
        "not in the other sessions it opens to the primary",
        fails=("di2_discard_query_in_every_session",),
        apply=_queries_only_in_heartbeats,
    ),
    Variant(
        name="heartbeats-too-rarely",
        breaks="a shadow asks for discard status every two ShadowHeartbeatFrequency periods",
        fails=("di2_heartbeat_within_shadow_heartbeat_frequency",),
        apply=_heartbeats_too_rarely,
    ),
    Variant(
        name="heartbeat-frequency-read-once",
        breaks="a shadow keeps the ShadowHeartbeatFrequency its heartbeats started with "
        "until a beat of it ends, when an admin changes it",
        fails=("di2_heartbeat_follows_a_live_frequency_change",),
        apply=_heartbeat_frequency_read_once,
    ),
    Variant(
        name="discards-before-next-hop-ack",
        breaks="records the discard status when the message is queued, before the next "
        "hop has acknowledged it",
        fails=("di1_di4_discard_once_next_hop_acknowledged",),
        apply=_records_discard_on_receipt,
    ),
    Variant(
        name="shadow-deletes-discarded-copies",
        breaks="a 2013 shadow deletes a discarded copy instead of moving it to its "
        "Shadow Safety Net",
        fails=("di1_di4_discard_once_next_hop_acknowledged",),
        apply=_shadow_deletes_discarded_copies,
    ),
    Variant(
        name="heartbeats-stop-after-a-notification",
        breaks="stops heartbeating a primary once it handed out a notification",
        fails=("di2_heartbeats_go_on_after_a_notification",),
        apply=_heartbeats_stop_after_a_notification,
    ),
    Variant(
        name="shadow-ignores-notifications",
        breaks="keeps the shadow copy after the discard notification, so it is promoted later",
        fails=("di4_notified_copy_is_not_promoted",),
        apply=_shadow_ignores_notifications,
    ),
    Variant(
        name="hands-out-every-notification",
        breaks="answers XQDISCARD with the notifications of every shadow, not only the querier's",
        fails=("di3_notifications_only_for_the_querying_shadow",),
        apply=_hands_out_every_notification,
    ),
    Variant(
        name="hands-notifications-out-again",
        breaks="never marks a discard notification handed over, so every later query "
        "(2013 heartbeat or 2010 end-of-session exchange) returns it again",
        fails=(
            "di3_notifications_only_for_the_querying_shadow",
            "xs6_discard_exchange_at_end_of_session",
        ),
        apply=_hands_notifications_out_again,
    ),
    Variant(
        name="forgets-discards-on-restart",
        breaks="keeps discard notifications only as long as the process lives",
        fails=("di5_discard_status_survives_primary_restart",),
        apply=_forgets_discards_on_restart,
    ),
    Variant(
        name="discard-events-never-expire",
        breaks="keeps discard events no shadow asked for past ShadowMessageAutoDiscardInterval",
        fails=(
            "di6_unqueried_discard_events_expire",
            "di6_unqueried_discard_event_expires_on_the_wire",
        ),
        apply=_discard_events_never_expire,
    ),
    Variant(
        name="discard-events-expire-a-minute-early",
        breaks="drops discard events a minute before ShadowMessageAutoDiscardInterval is up",
        fails=("di6_unqueried_discard_events_expire",),
        apply=_discard_events_expire_a_minute_early,
    ),
    Variant(
        name="multi-hop-discards-on-receipt",
        breaks="tells the sending hop to discard as soon as the message arrives, before "
        "relaying it onward",
        fails=("di7_multi_hop_shadow_kept_until_next_node_relayed",),
        apply=_discards_sender_shadow_on_receipt,
    ),
    Variant(
        name="unknown-copy-stops-the-discard-batch",
        breaks="stops moving a batch of discarded copies at the first copy it no longer holds",
        fails=("di4_notification_for_a_lost_copy_does_not_stop_the_batch",),
        apply=_unknown_copy_stops_the_discard_batch,
    ),
]
