"""A correct but unusual MTA: it tarpits, answering every refusal late on purpose.

Postfix (``smtpd_error_sleep_time``), Exim (ACL ``delay``) and others slow a
misbehaving client down by answering its errors seconds late. Nothing in the
catalogue sets a deadline for a refusal, so such an MTA fails no behaviour: its
``fails`` is empty, and ``tests/conformance/test_tarpit.py`` checks that the harness
pairs every late reply with its own command and judges it as the unbroken reference.
"""

from __future__ import annotations

import asyncio
from typing import Any

from . import Variant

#: how late every 4xx/5xx reply comes (seconds): more than the read timeout the tests
#: drive it with, far less than the harness's default reply timeout
TARPIT_DELAY = 2.0


def _tarpits_every_refusal() -> None:
    from reference_impl.smtp_in import NodeSMTP

    push = NodeSMTP.push
    too_many = NodeSMTP._too_many_strange
    reserved = NodeSMTP._reserved

    async def late_push(self: NodeSMTP, status: Any) -> None:
        text = status.decode(errors="replace") if isinstance(status, bytes) else status
        # the last line of a 4xx/5xx reply (its earlier lines are held until then)
        if text[:1] in ("4", "5") and text[3:4] != "-":
            await asyncio.sleep(TARPIT_DELAY)
        await push(self, status)

    async def late_too_many(self: NodeSMTP, arg: str | None) -> None:
        # the 421 that ends the session, late like any refusal (and still in order:
        # the session reads nothing more meanwhile)
        await asyncio.sleep(TARPIT_DELAY)
        await too_many(self, arg)

    async def late_reserved(self: NodeSMTP, arg: str | None) -> None:
        await asyncio.sleep(TARPIT_DELAY)
        await reserved(self, arg)

    NodeSMTP.push = late_push  # type: ignore[method-assign]
    NodeSMTP._too_many_strange = late_too_many  # type: ignore[method-assign]
    NodeSMTP._reserved = late_reserved  # type: ignore[method-assign]


VARIANTS: list[Variant] = [
    Variant(
        name="tarpit",
        breaks=(
            "nothing: answers every 4xx/5xx reply "
            f"{TARPIT_DELAY:g} s late on purpose (tarpitting), as Postfix and Exim can"
        ),
        fails=(),
        apply=_tarpits_every_refusal,
    ),
]
