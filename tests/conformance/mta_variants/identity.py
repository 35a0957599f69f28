"""Broken variants the harness sees only by its own identity of a message: two
different messages that share one Message-ID must both be delivered."""

from __future__ import annotations

from typing import Any

from . import Variant


def _suppresses_repeated_message_id() -> None:
    # A duplicate filter keyed on the Message-ID (as some MTAs and milters offer):
    # the second message carrying one already seen is acknowledged, then dropped,
    # even when it is another message. Its shadow copy stays on the shadow, whose
    # primary is up: nothing will ever deliver it.
    from reference_impl import messages
    from reference_impl.node import Node

    original = Node.enqueue
    seen: set[str] = set()

    def enqueue(self: Node, message: Any, plan: Any, *, categorise: bool = True) -> None:
        message_id = (messages.header(message.content, "Message-ID") or "").strip()
        if message.shadow_hop is None and message_id:
            if message_id in seen:
                return
            seen.add(message_id)
        original(self, message, plan, categorise=categorise)

    Node.enqueue = enqueue  # type: ignore[method-assign]


VARIANTS = [
    Variant(
        "suppresses-repeated-message-id",
        "acknowledges a second message carrying a Message-ID it has seen, then drops it",
        ("cr8_sender_timeout_after_copy_still_delivered",),
        _suppresses_repeated_message_id,
    ),
]
