"""A needle in a workload, for shrinking (``--shadowcheck-shrink``): a defect that only
one rare kind of queued message meets, and only across a restart, so that a failing
durability workload of hundreds of messages and several faults shrinks to one message and
one kill (tests/conformance/test_shrink.py)."""

from __future__ import annotations

import logging
from typing import Any

from . import Variant

#: the envelope the loader misreads: null reverse-path and more recipients than this
NEEDLE_RECIPIENTS = 2


def _loader_drops_multi_recipient_bounces() -> None:
    # On start the node reads its queued envelopes back. The envelope of a bounce (the
    # null reverse-path MAIL FROM:<>) with more than two recipients is misread - an empty
    # sender field followed by a recipient list is taken for a truncated record - and set
    # aside as corrupt (as Postfix moves an unreadable queue file to corrupt/): out of the
    # active queue, never delivered. Every other envelope, and every envelope while the
    # node runs, is fine; only a restart with such a bounce still queued loses it.
    from reference_impl.delivery import Delivery

    log = logging.getLogger("reference_impl.queue_loader")
    original = Delivery.run

    async def run(self: Delivery) -> Any:
        db = self.node.db
        for message in db.messages():
            if message.sender == "" and len(message.recipients) > NEEDLE_RECIPIENTS:
                log.warning("queue record %s unreadable: set aside as corrupt", message.id)
                with db.transaction(durable=True) as conn:
                    conn.execute("DELETE FROM forks WHERE message = ?", (message.id,))
                    conn.execute("DELETE FROM messages WHERE id = ?", (message.id,))
        return await original(self)

    Delivery.run = run  # type: ignore[method-assign]


VARIANTS: list[Variant] = [
    Variant(
        name="loader-drops-multi-recipient-bounces",
        breaks="on restart the queue loader misreads the envelope of a bounce (null "
        "reverse-path) with more than two recipients and sets it aside as corrupt: such a "
        "message, acknowledged and still queued when the node is killed, is never delivered",
        fails=("durability_single_node_kill_restart",),
        apply=_loader_drops_multi_recipient_bounces,
    ),
]
