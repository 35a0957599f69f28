"""Broken variants for who may use the shadow verbs, 2010 interoperability and
next hops without shadow redundancy (XS-2 .. XS-6)."""

from __future__ import annotations

from typing import Any

from . import Variant, force_settings


def _accepts_xshadow_from_anyone() -> None:
    # Takes any client's word that it keeps a shadow, so makes no copy of its own.
    from reference_impl.smtp_in import NodeSMTP

    original = NodeSMTP.smtp_XSHADOW

    async def smtp_XSHADOW(self: NodeSMTP, arg: str | None) -> None:
        if self._is_peer():
            await original(self, arg)
            return
        self.peer_state.sender_keeps_shadow = True
        await self.push("250 2.0.0 the sender keeps the shadow")

    NodeSMTP.smtp_XSHADOW = smtp_XSHADOW  # type: ignore[method-assign]


def _advertises_xshadow_to_anyone() -> None:
    # Shows XSHADOW in every EHLO reply, to anonymous clients too (the verb itself
    # still refuses them, so only the advertisement is wrong).
    from reference_impl.smtp_in import NodeHandler

    original = NodeHandler.handle_EHLO

    # aiosmtpd reads the hook's signature: it must name its five arguments (with *args
    # every connection was refused before its greeting, and the variant was found by that)
    async def handle_EHLO(
        self: NodeHandler,
        server: Any,
        session: Any,
        envelope: Any,
        hostname: str,
        responses: list[str],
    ) -> list[str]:
        responses = await original(self, server, session, envelope, hostname, responses)
        advert = self.node.shadow_advertisement()
        if advert and not any("XSHADOW" in line for line in responses):
            responses.insert(-1, "250-" + advert)
        return responses

    NodeHandler.handle_EHLO = handle_EHLO  # type: ignore[method-assign]


def _accepts_xqdiscard_from_anyone() -> None:
    # Hands every pending discard notification to an anonymous client.
    from reference_impl.smtp_in import NodeSMTP

    original = NodeSMTP.smtp_XQDISCARD

    async def smtp_XQDISCARD(self: NodeSMTP, arg: str | None) -> None:
        if self._is_peer():
            await original(self, arg)
            return
        await _hand_out_every_pending_discard(self)

    NodeSMTP.smtp_XQDISCARD = smtp_XQDISCARD  # type: ignore[method-assign]


async def _hand_out_every_pending_discard(session: Any) -> None:
    """Answer XQDISCARD with every shadow's pending notifications, whoever asked."""
    node = session.node
    pending = {e["shadow_node"] for e in node.db.discard_events() if not e["handed_out_at"]}
    lines = [f"DBID {node.db.db_id}"]
    for shadow in sorted(pending):
        lines += [f"DISCARD {m}" for m in node.db.take_discards(shadow, node.clock.now())]
    lines.append(f"{len(lines) - 1} discard notifications")
    for line in lines[:-1]:
        await session.push("250-" + line)
    await session.push("250 " + lines[-1])


def _xqdiscard_for_any_boundary() -> None:
    # An authenticated node of another DAG gets every pending discard notification: the
    # boundary check forgotten in XQDISCARD, notifications not filtered by who asks.
    from reference_impl.smtp_in import NodeSMTP

    original = NodeSMTP.smtp_XQDISCARD

    async def smtp_XQDISCARD(self: NodeSMTP, arg: str | None) -> None:
        peer = self.peer_state.peer_node
        if peer is None or self.node.same_boundary(peer):
            await original(self, arg)
            return
        await _hand_out_every_pending_discard(self)

    NodeSMTP.smtp_XQDISCARD = smtp_XQDISCARD  # type: ignore[method-assign]


def _xshadow_to_any_hop() -> None:
    # Issues XSHADOW to every next node, whether or not it advertised it.
    from reference_impl.peer_link import PeerLink

    original = PeerLink.relay

    async def relay(
        self: PeerLink, sender: str, recipients: list[str], content: bytes, keep_shadow: bool
    ) -> str:
        return await original(self, sender, recipients, content, True)

    PeerLink.relay = relay  # type: ignore[method-assign]


def _acknowledges_at_once() -> None:
    # No delayed acknowledgement: a 2010 node answers 250 as soon as it queued the message.
    force_settings(MaxAcknowledgementDelay=0.0)


def _redelivers_to_delivered_hops() -> None:
    # A hop that has the message is not marked delivered while another hop is
    # pending, so it gets the message again at every retry.
    from reference_impl.delivery import Delivery
    from reference_impl.queue_db import Fork, Message

    original = Delivery._finish_fork

    def finish_fork(self: Delivery, message: Message, fork: Fork, state: str, error: str) -> None:
        others = [f for f in self.node.db.forks_of(message.id) if f.domain != fork.domain]
        if state == "delivered" and any(f.state == "pending" for f in others):
            self._retry(message, fork, "delivered, not marked")
            return
        original(self, message, fork, state, error)

    Delivery._finish_fork = finish_fork  # type: ignore[method-assign]


def _no_discard_exchange_at_session_end() -> None:
    # A 2010 node skips the discard exchange after relaying a message; it still
    # asks at the start of a session (DI-2).
    from reference_impl.peer_link import PeerLink

    original_relay = PeerLink.relay
    original_query = PeerLink.query_discards

    async def relay(
        self: PeerLink, sender: str, recipients: list[str], content: bytes, keep_shadow: bool
    ) -> str:
        reply = await original_relay(self, sender, recipients, content, keep_shadow)
        setattr(self, "relayed", True)  # noqa: B010 - a mark on this session only
        return reply

    async def query_discards(self: PeerLink) -> list[str]:
        if getattr(self, "relayed", False):
            return []
        return await original_query(self)

    PeerLink.relay = relay  # type: ignore[method-assign]
    PeerLink.query_discards = query_discards  # type: ignore[method-assign]


def _refused_shadow_verbs_not_counted() -> None:
    # Refuses a stranger's shadow verbs without counting them, so a stranger can tell
    # them from unknown verbs: the fifth still gets 500 where an unknown one ends the session.
    from reference_impl.smtp_in import REPLY_NOT_RECOGNISED, NodeSMTP

    async def _refuse_unless_peer(self: NodeSMTP, verb: str) -> bool:
        if self._is_peer():
            return False
        await self.push(REPLY_NOT_RECOGNISED.format(verb=verb))
        return True

    NodeSMTP._refuse_unless_peer = _refuse_unless_peer  # type: ignore[method-assign]


VARIANTS: list[Variant] = [
    Variant(
        name="advertises-xshadow-to-anyone",
        breaks="advertises XSHADOW in the EHLO reply to anonymous clients, not only to "
        "authenticated peers of its boundary",
        fails=("xs1_xshadow_advertised_to_authorised_peer_only",),
        apply=_advertises_xshadow_to_anyone,
    ),
    Variant(
        name="accepts-xshadow-from-anyone",
        breaks="lets an unauthenticated client claim it keeps the shadow (XSHADOW), "
        "and then makes no copy of its own",
        fails=("xs3_stranger_cannot_shadow",),
        apply=_accepts_xshadow_from_anyone,
    ),
    Variant(
        name="accepts-xqdiscard-from-anyone",
        breaks="answers XQDISCARD from an unauthenticated client with every pending "
        "discard notification, which the real shadow then never gets",
        fails=("xs3_stranger_cannot_query_discards",),
        apply=_accepts_xqdiscard_from_anyone,
    ),
    Variant(
        name="xqdiscard-for-any-boundary",
        breaks="answers XQDISCARD from an authenticated node of another DAG with every "
        "pending discard notification, which the boundary's shadow then never gets",
        fails=("xs3_other_boundary_cannot_query_discards",),
        apply=_xqdiscard_for_any_boundary,
    ),
    Variant(
        name="xshadow-to-any-hop",
        breaks="issues XSHADOW to a next node that did not advertise it",
        fails=("xs2_xshadow_only_where_advertised",),
        apply=_xshadow_to_any_hop,
    ),
    Variant(
        name="acknowledges-without-delay",
        breaks="a 2010 node answers 250 at once, without waiting for the next hop or "
        "MaxAcknowledgementDelay",
        fails=("xs4_delayed_acknowledgement",),
        apply=_acknowledges_at_once,
    ),
    Variant(
        name="redelivers-to-delivered-hops",
        breaks="does not mark a next hop delivered while another is pending, and delivers "
        "to it again at every retry",
        fails=("xs5_next_hop_without_shadow_redundancy",),
        apply=_redelivers_to_delivered_hops,
    ),
    Variant(
        name="no-discard-exchange-at-session-end",
        breaks="a 2010 node does not end its relay sessions with the discard exchange",
        fails=("xs6_discard_exchange_at_end_of_session",),
        apply=_no_discard_exchange_at_session_end,
    ),
    Variant(
        name="refused-shadow-verbs-not-counted",
        breaks="refuses a stranger's shadow verbs without counting them like unknown verbs",
        fails=("xs3_stranger_counts_shadow_verbs_like_unknown_ones",),
        apply=_refused_shadow_verbs_not_counted,
    ),
]
