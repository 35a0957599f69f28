"""Broken variants for Safety Net (SN)."""

from __future__ import annotations

from . import Variant


def _safety_net_never_expires() -> None:
    from reference_impl.queue_db import QueueDB

    def expire_safety_net(self: QueueDB, now: float) -> int:
        return 0

    QueueDB.expire_safety_net = expire_safety_net  # type: ignore[method-assign]


VARIANTS: list[Variant] = [
    Variant(
        name="safety-net-never-expires",
        breaks="keeps messages in Safety Net past SafetyNetHoldTime",
        fails=("sn1_sn3_primary_safety_net_hold_time",),
        apply=_safety_net_never_expires,
    ),
]
