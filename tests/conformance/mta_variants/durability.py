"""Broken variants for durability at volume (the workload scenarios of durability.yaml)."""

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


VARIANTS: list[Variant] = [
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
