"""Broken variants for who may use the shadow verbs, 2010 interoperability and
next hops without shadow redundancy (XS-2 .. XS-6)."""

from __future__ import annotations

from . import Variant


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


def _accepts_xqdiscard_from_anyone() -> None:
    # Hands every pending discard notification to an anonymous client.
    from reference_impl.smtp_in import NodeSMTP

    original = NodeSMTP.smtp_XQDISCARD

    async def smtp_XQDISCARD(self: NodeSMTP, arg: str | None) -> None:
        if self._is_peer():
            await original(self, arg)
            return
        node = self.node
        pending = {e["shadow_node"] for e in node.db.discard_events() if not e["handed_out_at"]}
        lines = [f"DBID {node.db.db_id}"]
        for shadow in sorted(pending):
            taken = node.db.take_discards(shadow, node.clock.now())
            lines += [f"DISCARD {message}" for message in taken]
        lines.append(f"{len(lines) - 1} discard notifications")
        for line in lines[:-1]:
            await self.push("250-" + line)
        await self.push("250 " + lines[-1])

    NodeSMTP.smtp_XQDISCARD = smtp_XQDISCARD  # type: ignore[method-assign]


VARIANTS: list[Variant] = [
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
]
